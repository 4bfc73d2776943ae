"""``enginedead calibrate`` without engines: bad input, one line and exit 2, before any engine
starts (conventions: ``tests/support/badinput.py``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.support.badinput import Command, assert_clean, assert_command_is_one_line_exit_2, config, model
from tests.support.downstream import enginedead
from tests.support.sizing import GEMMA_26B

# --- sizing's bad input, before any engine starts -----------------------------------------------

TINY = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
    "vocab_size": 1000,
    "max_position_embeddings": 512,
}

BAD = [
    (
        "depth-out-of-range",
        ["--model", str(GEMMA_26B), "--forecast-layers", "1,6"],
        "enginedead calibrate: error: --forecast-layers 1,6: slice depth 6 is out of range",
        None,
    ),
    (
        "depth-zero",
        ["--forecast-layers", "0,1"],
        "argument --forecast-layers: slice depth 0 must be at least 1",
        None,
    ),
    (
        "depth-not-a-number",
        ["--forecast-layers", "a"],
        "argument --forecast-layers: 'a' is not a whole number",
        None,
    ),
    (
        "depths-equal",
        ["--model", str(GEMMA_26B), "--forecast-layers", "2,2"],
        "give two different slice depths",
        None,
    ),
    (
        "config-without-layers",
        ["--model", "m", "--forecast-layers", "1,2"],
        'm/config.json has no layers: "num_hidden_layers" is None',
        {k: v for k, v in TINY.items() if k != "num_hidden_layers"},
    ),
    (
        "tokens-below-seqs",
        ["--max-num-seqs", "4096"],
        "--max-num-batched-tokens 2048 (vLLM's default for the CPU server) is below --max-num-seqs 4096: "
        "vLLM refuses max_num_batched_tokens (2048) < max_num_seqs (4096)",
        None,
    ),
    (
        "tokens-below-seqs-given",
        ["--max-num-seqs", "64", "--max-num-batched-tokens", "32"],
        "--max-num-batched-tokens 32 is below --max-num-seqs 64",
        None,
    ),
    (
        "model-len-too-long",
        ["--max-model-len", "4096"],
        "--max-model-len 4096 is longer than the model allows (512, from its config.json)",
        None,
    ),
    (
        "kv-cache-too-small",
        ["--kv-cache-tokens", "100"],
        "--kv-cache-tokens 100 cannot hold one request of --max-model-len 512",
        None,
    ),
    (
        "batch-above-seqs",
        ["--batch-sizes", "64", "--max-num-seqs", "16"],
        "--batch-sizes 64 exceed --max-num-seqs 16",
        None,
    ),
    ("seqs-zero", ["--max-num-seqs", "0"], "argument --max-num-seqs: '0' must be at least 1", None),
    (
        "deadline-fraction",
        ["--deadline", "1.5"],
        "argument --deadline: '1.5' is not a whole number of seconds",
        None,
    ),
    (
        "not-enough-memory",
        ["--model", "m"],
        "--model",
        {
            **TINY,
            "vocab_size": 2_000_000_000,
            "hidden_size": 4096,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
        },
    ),
    (
        "slice-not-enough-memory",
        ["--model", "m", "--forecast-layers", "1,2"],
        "--forecast-layers: slice 1 (1 layers (1 full_attention)) needs",
        {
            **TINY,
            "num_hidden_layers": 8,
            "num_experts": 4096,
            "moe_intermediate_size": 65536,
            "hidden_size": 16384,
            "num_attention_heads": 32,
            "num_key_value_heads": 32,
        },
    ),
]


@pytest.mark.processes
@pytest.mark.usefixtures("no_child_engine")  # an engine about to start fails the test
@pytest.mark.parametrize(("args", "needle", "config"), [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_sizing_input_is_one_line_exit_2_before_any_engine(
    tmp_path: Path,
    args: list[str],
    needle: str,
    config: dict[str, Any] | None,
) -> None:
    if config is not None:
        (tmp_path / "m").mkdir()
        (tmp_path / "m" / "config.json").write_text(json.dumps(config))
    done = enginedead("calibrate", *args, cwd=tmp_path)
    assert done.returncode == 2, (done.stdout[-2000:], done.stderr[-2000:])
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    assert done.stdout == ""
    assert_clean(done.stdout + done.stderr)
    assert needle in lines[0], (needle, lines[0])
    if "memory" in needle or "memory" in str(args) or "needs" in needle:
        assert "available" in lines[0]


# --- bad input here: one line each (conventions: tests/support/badinput.py) ---------------------------------

COMMAND_CASES = [
    Command("vllm-env-calibrate", ("calibrate", "--batch-sizes", "1"),
            ("enginedead calibrate: error: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='abc' (from environment) "
             "is not an integer",),
            env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "abc"}),
    Command("log-a-directory", ("calibrate", "--log", "."), ("--log '.': ", "is a directory")),
    Command("plot-under-a-file", ("calibrate", "--plot", "afile/p.png"),
            ("--plot 'afile/p.png': ", "is not a directory"), files={"afile": "x"}),
    Command("plot-unknown-format", ("calibrate", "--plot", "steps.xyz"),
            ("enginedead calibrate: error: --plot 'steps.xyz': matplotlib picks the format",)),
    Command("model-hidden-not-divisible", ("calibrate", "--model", "m"),
            ('"hidden_size" 100 does not split into "num_attention_heads" 3',),
            files=model(config(hidden_size=100, num_attention_heads=3, num_key_value_heads=None,
                               head_dim=None))),
    Command("model-not-utf8", ("calibrate", "--model", "m"), ("argument --model:", "is not UTF-8 text")),
    Command("headroom-inf", ("calibrate", "--headroom", "inf"),
            ("argument --headroom: 'inf' must be above 0",)),
    Command("headroom-nan", ("calibrate", "--headroom", "nan"),
            ("argument --headroom: 'nan' must be above 0",)),
    # --- output paths: proven at the start, by the one writer (issue 22, 20.5) ------------------
    Command("log-in-sys", ("calibrate", "--log", "/sys/x.log"),
            ("enginedead calibrate: error: --log '/sys/x.log': cannot be created", "/sys is the kernel's")),
    Command("plot-and-log-one-file-by-a-link", ("calibrate", "--log", "p.png", "--plot", "link.png"),
            ("--plot 'link.png': names the same file as --log 'p.png'",),
            files={"p.png": "x"}, nodes={"link.png": "link:p.png"}),
    Command("log-fifo-calibrate", ("calibrate", "--log", "fifo"),
            ("enginedead calibrate: error: --log 'fifo': ", "is a FIFO that nothing reads"),
            nodes={"fifo": "fifo"}),
    Command("plot-dangling-dir", ("calibrate", "--plot", "gone/p.png"),
            ("enginedead calibrate: error: --plot 'gone/p.png': ", "is a symbolic link to"),
            nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    # --- 36.2: the plugin's guard switch, refused in the plugin's words ---------------------------
    Command("env-guard-not-a-switch-calibrate", ("calibrate", "--batch-sizes", "1"),
            ("enginedead calibrate: error: ENGINEDEAD_GUARD='maybe' (from environment): 'maybe' is not a "
             "switch; use 1 or 0",), env={"ENGINEDEAD_GUARD": "maybe"}),
    # --- 37.1: the decode-only calibration's batch sizes within what vLLM builds ---------------------
    Command("batch-sizes-over-vllms-calibrate", ("calibrate", "--batch-sizes", "99999999"),
            ("enginedead calibrate: error: --batch-sizes 99999999: batch size 99999999 is over 4096, the "
             "largest an offline engine takes",)),
    # --- 37.2: the model against the harness's context (the decode-only engine starts with it) -------
    Command("model-context-shorter-calibrate", ("calibrate", "--model", "m", "--batch-sizes", "2"),
            ("enginedead calibrate: error: --model ", "/m/config.json: the model's context is 16 tokens",
             "shorter than the harness's max_model_len 512"),
            files=model(config(max_position_embeddings=16))),
    Command("model-type-unknown-calibrate", ("calibrate", "--model", "m"),
            ("enginedead calibrate: error: --model ",
             "\"model_type\": 'nosuchtype' is known to neither vLLM"),
            files=model(config(model_type="nosuchtype"))),
    # --- 45: the server's KV cache, refused where vLLM would not start with it --------------------------
    Command("kv-space-not-a-number-calibrate", ("calibrate", "--model", "gemma-4-moe-mini"),
            ("enginedead calibrate: error: VLLM_CPU_KVCACHE_SPACE='lots' (from the environment) is not "
             "a whole number of GiB",), env={"VLLM_CPU_KVCACHE_SPACE": "lots"}),
    Command("server-memory-too-small-calibrate",
            ("calibrate", "--model", "gemma-4-26b-a4b", "--forecast-layers", "1,2",
             "--server-memory-gib", "32"),
            ("enginedead calibrate: error: --server-memory-gib 32 leaves no KV cache: vLLM's rule: "
             "0.92 x 32 GiB", "vLLM refuses to start")),
    Command("kv-space-below-one-request-calibrate",
            ("calibrate", "--model", "gemma-4-26b-a4b", "--forecast-layers", "1,2"),
            ("enginedead calibrate: error: VLLM_CPU_KVCACHE_SPACE=1: the KV cache (1.00 GiB",
             "cannot hold one request of --max-model-len 262144"), env={"VLLM_CPU_KVCACHE_SPACE": "1"}),
    Command("memory-fraction-over-one-calibrate", ("calibrate", "--gpu-memory-utilization", "1.5"),
            ("argument --gpu-memory-utilization: '1.5' must be at most 1",)),
    # --- 37.4: a plugin list that leaves ours out ------------------------------------------------------
    Command("vllm-plugins-calibrate", ("calibrate", "--batch-sizes", "1"),
            ("enginedead calibrate: error: VLLM_PLUGINS='lora' (from environment) leaves out enginedead",
             "; fix: export VLLM_PLUGINS=lora,enginedead (or unset it)"), env={"VLLM_PLUGINS": "lora"}),
]


@pytest.mark.processes
@pytest.mark.parametrize("case", COMMAND_CASES, ids=[c.id for c in COMMAND_CASES])
def test_bad_command_line_is_one_line_exit_2(
    tmp_path: Path, no_child_engine: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch, case: Command
) -> None:
    """Each bad ``enginedead calibrate`` command line: one line, exit 2, at once, nothing left."""
    assert_command_is_one_line_exit_2(tmp_path, private_tmp, monkeypatch, case)


# --- the presets by name ----------------------------------------------------------------------


@pytest.mark.processes
def test_list_models_names_every_preset_and_what_it_is() -> None:
    done = enginedead("calibrate", "--list-models")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert [ln.split()[0] for ln in lines[:-1]] == ["gemma-4-26b-a4b", "gemma-4-moe-mini", "tiny-llama"]
    assert "Gemma4ForCausalLM; 30 layers; hidden 2816; 128 experts" in lines[0]
    assert lines[-1] == "use: enginedead calibrate --model NAME (a directory path works too)"
    assert done.stderr == ""


@pytest.mark.processes
def test_list_models_as_json_gives_each_directory() -> None:
    done = enginedead("calibrate", "--list-models", "--json")
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    assert set(found) == {"gemma-4-26b-a4b", "gemma-4-moe-mini", "tiny-llama"}
    for name, info in found.items():
        assert Path(info["directory"], "config.json").is_file() and Path(info["directory"]).name == name
        assert info["summary"]
