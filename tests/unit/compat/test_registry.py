"""Which model architectures the installed vLLM can build and which model types it reads: the
registries' sources first, then the registries."""

from __future__ import annotations

import pytest

from pytest_enginedead.compat import registry

REGISTRY = '''
_TEXT_GENERATION_MODELS = {
    "LlamaForCausalLM": ("llama", "LlamaForCausalLM"),
    "Gemma4ForCausalLM": ("gemma4", "Gemma4ForCausalLM"),
}
_EMBEDDING_MODELS: dict[str, tuple[str, str]] = {"BertModel": ("bert", "BertModel")}
_PREVIOUSLY_SUPPORTED_MODELS = {"MotifForCausalLM": "0.10.2"}
_VLLM_MODELS = {
    **_TEXT_GENERATION_MODELS,
    **_EMBEDDING_MODELS,
}
'''


def test_the_registry_source_gives_the_architectures_its_union_unpacks() -> None:
    """The in-tree dicts the union unpacks count (an annotated one too); a retired one does not;
    a source without the union lists nothing, so every answer comes from the registry itself."""
    listed = registry.architectures_in_source(REGISTRY)
    assert listed == {"LlamaForCausalLM", "Gemma4ForCausalLM", "BertModel"}
    assert registry.architectures_in_source(REGISTRY.replace("_VLLM_MODELS", "_OTHER")) == frozenset()


def test_an_architecture_the_source_does_not_list_is_asked_of_the_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[str] = []

    def ask_registry() -> frozenset[str]:
        asked.append("registry")
        return frozenset({"LlamaForCausalLM", "PluginForCausalLM"})

    monkeypatch.setattr(registry, "listed_architectures", lambda: frozenset({"LlamaForCausalLM"}))
    monkeypatch.setattr(registry, "known_architectures", ask_registry)
    assert registry.knows_architecture("LlamaForCausalLM") and asked == []
    assert registry.knows_architecture("PluginForCausalLM") and asked == ["registry"]
    assert not registry.knows_architecture("NoSuchModelForCausalLM")


# --- model types: vLLM's config registry and transformers' mapping, from their sources ---------------

#: vLLM 0.32.0's layout: a dict subclass called with keywords and an unpacked dict
VLLM_CONFIGS = '''
_CONFIG_REGISTRY: dict[str, type[PreTrainedConfig]] = LazyConfigDict(
    chatglm="ChatGLMConfig",
    RefinedWeb="RWConfig",
    **{"unlimited-ocr": "UnlimitedOCRConfig"},
)
'''
#: transformers 5.x: the mapping built in one file, extended and re-made in another
AUTO_MAPPINGS = '''
CONFIG_MAPPING_NAMES = OrderedDict(
    [
        ("llama", "LlamaConfig"),
        ("gemma4_text", "Gemma4TextConfig"),
    ]
)
'''
CONFIGURATION_AUTO = '''
from .auto_mappings import CONFIG_MAPPING_NAMES
CONFIG_MAPPING_NAMES.update({"mlcd": "MLCDVisionConfig"})
CONFIG_MAPPING_NAMES = OrderedDict(**{"gpt-sw3": "GPT2Config"}, **CONFIG_MAPPING_NAMES)
'''


def test_the_config_sources_give_the_model_types_they_register() -> None:
    """Keywords, unpacked dicts, lists of pairs, ``update`` and a re-made mapping that unpacks the
    old one: every key counts, across the two files transformers 5.x builds it in (4.x: one)."""
    assert registry.mapping_keys_in_source(VLLM_CONFIGS, "_CONFIG_REGISTRY") == {
        "chatglm", "RefinedWeb", "unlimited-ocr"}
    keys: dict[str, set[str]] = {}
    registry.mapping_keys_in_source(AUTO_MAPPINGS, "CONFIG_MAPPING_NAMES", keys)
    found = registry.mapping_keys_in_source(CONFIGURATION_AUTO, "CONFIG_MAPPING_NAMES", keys)
    assert found == {"llama", "gemma4_text", "mlcd", "gpt-sw3"}
    named_by_a_constant = AUTO_MAPPINGS.replace('("llama"', "(LLAMA")  # not a string: not read
    assert registry.mapping_keys_in_source(named_by_a_constant, "CONFIG_MAPPING_NAMES") == {"gemma4_text"}


def test_a_model_type_is_asked_of_the_sources_and_imported_only_where_they_cannot_be_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    imported: list[str] = []

    def import_them() -> frozenset[str]:
        imported.append("registries")
        return frozenset({"llama", "plugintype"})

    monkeypatch.setattr(registry, "known_model_types", import_them)
    monkeypatch.setattr(registry, "listed_model_types", lambda: frozenset({"llama", "chatglm"}))
    assert registry.knows_model_type("chatglm") and not registry.knows_model_type("nosuchtype")
    assert imported == []
    monkeypatch.setattr(registry, "listed_model_types", lambda: frozenset())  # a source not read
    assert registry.knows_model_type("plugintype") and imported == ["registries"]


def test_the_installed_sources_list_the_usual_model_types() -> None:
    """Read from this machine's vLLM and transformers (no import): the bundled model's, Gemma-4's."""
    listed = registry.listed_model_types()
    if not listed:
        pytest.skip("vLLM or transformers is not installed here")
    assert {"llama", "gemma4_text", "gemma4"} <= listed and "nosuchtype" not in listed
