"""Write a word-level tokenizer into a bundled dummy-weight model directory.

The bundled models have random weights, but vLLM's OpenAI-compatible server still
needs a real tokenizer to turn prompts into ids and sampled ids back into text, and
its vocabulary must be exactly the model's ``vocab_size``.  This builds one
deterministically with the ``tokenizers`` library: the special tokens ``<unk>`` 0,
``<s>`` 1, ``</s>`` 2 and ``<pad>`` 3, whitespace, digits, punctuation, a few hundred
common English words (so ordinary prompts map to real ids), then pronounceable
pseudo-words up to ``vocab_size``.  Text is lowercased; a space before a piece is a
leading ``▁`` in the token, as in Llama's tokenizer, so decoding gives readable text.

    python -m pytest_enginedead.models.make_tokenizer [MODEL_DIR ...]

writes ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json``
into each directory (by default the bundled ``tiny-llama``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import string
from collections.abc import Iterator, Sequence
from pathlib import Path

# (tokenizers < 0.23 has no py.typed)
from tokenizers import (  # type: ignore[import-untyped,unused-ignore]
    Regex,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
)

SPACE = "▁"  # U+2581, what a space becomes before tokenization
SPECIAL = ("<unk>", "<s>", "</s>", "<pad>")  # ids 0, 1, 2, 3
UNK, BOS, EOS, PAD = SPECIAL
MAX_LENGTH = 512
# a word (letters), one digit, one other symbol, with or without a space before it;
# then lone whitespace characters and lone spaces
PIECE = (
    rf"{SPACE}?\p{{L}}+|{SPACE}?\p{{N}}|{SPACE}?[^\s{SPACE}\p{{L}}\p{{N}}]|\s|{SPACE}"
)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] + ': ' + message['content'] + '\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)

WORDS = """
the of and to a in is it you that he was for on are with as i his they be at one
have this from or had by not word but what some we can out other were all there
when up use your how said an each she which do their time if will way about many
then them write would like so these her long make thing see him two has look more
day could go come did number sound no most people my over know water than call
first who may down side been now find any new work part take get place made live
where after back little only round man year came show every good me give our under
name very through just form sentence great think say help low line differ turn
cause much mean before move right boy old too same tell does set three want air
well also play small end put home read hand port large spell add even land here
must big high such follow act why ask men change went light kind off need house
picture try us again animal point mother world near build self earth father head
stand own page should country found answer school grow study still learn plant
cover food sun four between state keep eye never last let thought city tree cross
farm hard start might story saw far sea draw left late run while press close night
real life few north open seem together next white children begin got walk example
ease paper group always music those both mark often letter until mile river car
feet care second book carry took science eat room friend began idea fish mountain
stop once base hear horse cut sure watch color face wood main enough plain girl
usual young ready above ever red list though feel talk bird soon body dog family
direct pose leave song measure door product black short numeral class wind
question happen complete ship area half rock order fire south problem piece told
knew pass since top whole king space heard best hour better true during hundred
five remember step early hold west ground interest reach fast verb sing listen six
table travel less morning ten simple several vowel toward war lay against pattern
slow center love person money serve appear road map rain rule govern pull cold
notice voice unit power town fine certain fly fall lead cry dark machine note
wait plan figure star box noun field rest correct able pound done beauty drive
stood contain front teach week final gave green oh quick develop ocean warm free
minute strong special mind behind clear tail produce fact street inch multiply
nothing course stay wheel full force blue object decide surface deep moon island
foot system busy test record boat common gold possible plane age dry wonder laugh
thousand ago ran check game shape equate hot miss brought heat snow tire bring yes
distant fill east paint language among am is are was were been being has having do
doing done does did hello hi hey thanks thank please sorry okay ok goodbye bye
welcome dear mr mrs ms dr sir madam
capital france paris england london germany berlin italy rome spain madrid china
beijing japan tokyo india delhi russia moscow america american united states
kingdom canada ottawa mexico brazil australia europe european asia africa
washington york california texas president government minister prime king queen
future ai artificial intelligence model models language computer data science
technology internet software code program python learning machine neural network
deep token tokens text answer question chat assistant user system message
response prompt generate generated output input example test hello world
monday tuesday wednesday thursday friday saturday sunday january february march
april june july august september october november december today tomorrow
yesterday zero eleven twelve twenty thirty forty fifty sixty seventy eighty
ninety million billion seven eight nine first second third
me myself yourself himself herself itself ourselves themselves mine yours
hers ours theirs its who whom whose whichever whatever
good bad better worse best worst big bigger biggest small smaller smallest
beautiful important different possible available popular happy sad nice
interesting known famous largest oldest new newest
also however therefore because although unless whether either neither nor yet
maybe perhaps probably really actually always usually sometimes never already
quite rather almost nearly
is am are was were will shall should would can could may might must
make makes made making go goes went gone going come comes came coming
know knows knew known knowing think thinks thought thinking see sees saw seen
take takes took taken want wants wanted use uses used using find finds found
give gives gave given tell tells told ask asks asked work works worked
seem seems seemed feel feels felt try tries tried leave leaves left call calls
called named name names story stories once upon there lived
"""


def word_list() -> list[str]:
    """The common words, first occurrence first, without duplicates."""
    words = [w.lower() for w in WORDS.split() if w.isalpha()]
    return list(dict.fromkeys(words))


def pseudo_words() -> Iterator[str]:
    """Pronounceable filler words: two consonant-vowel syllables, then three.

    The three-syllable words are visited with a stride coprime to their count, so
    consecutive ids look varied rather than ``bababa``, ``bababe``, ...
    """
    syllables = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
    yield from ("".join(p) for p in itertools.product(syllables, repeat=2))
    count = len(syllables) ** 3
    stride = 7919  # prime, does not divide 70**3
    for k in range(count):
        i = k * stride % count
        a, rest = divmod(i, len(syllables) ** 2)
        b, c = divmod(rest, len(syllables))
        yield syllables[a] + syllables[b] + syllables[c]


def vocabulary(size: int) -> dict[str, int]:
    """Exactly ``size`` distinct tokens, the special tokens first."""
    head: list[str] = [*SPECIAL, SPACE, "\n", "\t"]
    for symbol in [*string.digits, *string.punctuation]:
        head += [SPACE + symbol, symbol]
    for word in word_list():
        head += [SPACE + word, word]
    vocab = dict.fromkeys(head)
    if len(vocab) > size:
        raise ValueError(f"vocab_size {size} is below the {len(vocab)} fixed tokens")
    for word in pseudo_words():
        if len(vocab) >= size:
            break
        vocab.setdefault(SPACE + word)
    if len(vocab) != size:
        raise ValueError(f"vocab_size {size} is above the {len(vocab)} possible tokens")
    return {token: i for i, token in enumerate(vocab)}


def build(vocab_size: int) -> Tokenizer:
    """The tokenizer for a model whose embedding has ``vocab_size`` rows."""
    vocab = vocabulary(vocab_size)
    tok = Tokenizer(models.WordLevel(vocab, unk_token=UNK))
    tok.normalizer = normalizers.Sequence(
        [
            normalizers.NFKC(),
            normalizers.Lowercase(),
            normalizers.Replace(" ", SPACE),
            normalizers.Prepend(SPACE),
        ]
    )
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(PIECE), behavior="isolated")
    tok.decoder = decoders.Sequence(
        [decoders.Replace(SPACE, " "), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.post_processor = processors.TemplateProcessing(
        single=f"{BOS} $A",
        pair=f"{BOS} $A $B:1",
        special_tokens=[(BOS, vocab[BOS])],
    )
    tok.add_special_tokens(list(SPECIAL))
    return tok


def write(model_dir: Path) -> None:
    """Write the three tokenizer files next to ``model_dir/config.json``."""
    config = json.loads((model_dir / "config.json").read_text(encoding="utf-8"))
    vocab_size = int(config["vocab_size"])
    for key, token in (("bos_token_id", BOS), ("eos_token_id", EOS)):
        expected = SPECIAL.index(token)
        if config.get(key, expected) != expected:
            raise ValueError(
                f"{model_dir}: {key} is {config[key]}, the tokenizer has {expected}"
            )
    tok = build(vocab_size)
    if tok.get_vocab_size(with_added_tokens=True) != vocab_size:
        raise AssertionError(f"built {tok.get_vocab_size()} tokens, not {vocab_size}")
    (model_dir / "tokenizer.json").write_text(
        tok.to_str(pretty=False) + "\n", encoding="utf-8"
    )
    special = {"bos_token": BOS, "eos_token": EOS, "unk_token": UNK, "pad_token": PAD}
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        **special,
        "model_max_length": MAX_LENGTH,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
    }
    for name, data in (
        ("tokenizer_config.json", tokenizer_config),
        ("special_tokens_map.json", special),
    ):
        text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
        (model_dir / name).write_text(text, encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0] if __doc__ else None
    )
    parser.add_argument(
        "model_dirs",
        nargs="*",
        type=Path,
        metavar="MODEL_DIR",
        default=[Path(__file__).resolve().parent / "tiny-llama"],
        help="directories holding a config.json (default: the bundled tiny-llama)",
    )
    for model_dir in parser.parse_args(argv).model_dirs:
        write(model_dir)
        print(f"wrote the tokenizer into {model_dir}")


if __name__ == "__main__":
    main()
