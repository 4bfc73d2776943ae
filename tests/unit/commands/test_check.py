"""``enginedead check`` without engines: bad input, one line and exit 2; what pytest refuses; an
inherited guard cleared (conventions: ``tests/support/badinput.py``)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_enginedead.compat import registry, versions
from pytest_enginedead.logic import releases
from pytest_enginedead.logic.inputs.modelconfig import BUNDLED_MODEL
from tests.support import examples
from tests.support.badinput import (
    BAD_TOKENIZER,
    KNOWN,
    LONG,
    LONG_MODEL,
    NESTED,
    NOBODY,
    Command,
    assert_clean,
    assert_command_is_one_line_exit_2,
    config,
    leftovers,
    model,
    policy_module,
    returning,
    usage_line,
    with_tokenizer,
)
from tests.support.downstream import Downstream, enginedead
from tests.support.records import deaths_written

# --- bad input here: one line each (conventions: tests/support/badinput.py) ---------------------------------

COMMAND_CASES = [
    Command("vllm-env-check-vllm-stock", ("check", "--policy", "vllm-stock"),
            ("enginedead check: error: VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='1.5' (from environment)",),
            env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "1.5"}),
    Command("vllm-env-zero", ("check",), ("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS='0'", "must be at least 1"),
            env={"VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS": "0"}),
    Command("env-threshold", ("check",), ("ENGINEDEAD_BUSY_THRESHOLD='100' (from environment)", "at most 64"),
            env={"ENGINEDEAD_BUSY_THRESHOLD": "100"}),
    Command("report-under-a-file", ("check", "--report", "afile/r.json"),
            ("enginedead check: error: --report 'afile/r.json': cannot be created: ", "is not a directory"),
            files={"afile": "x"}),
    Command("report-unknown-user", ("check", "--report", f"{NOBODY}/r.json"),
            (f"--report '{NOBODY}/r.json': ", "cannot be expanded"),),
    Command("report-name-too-long", ("check", "--report", LONG),
            ("--report 'aaa", "too long a file name")),
    Command("model-bad-vocab", ("check", "--model", "m"),
            ("enginedead check: error: --model", '"vocab_size": 0 must be at least 1'),
            files=model(config(vocab_size=0))),
    Command("model-nested-json", ("check", "--model", "m"), ("argument --model:", "nests too deeply"),
            files=model(NESTED)),
    Command("model-unknown-user", ("check", "--model", f"{NOBODY}/m"),
            ("argument --model:", "cannot be expanded")),
    Command("model-name-too-long", ("check", "--model", LONG), ("argument --model:", "File name too long")),
    Command("policy-nan", ("check", "--policy", "cli_nan:p", "--batch-sizes", "8"),
            ("enginedead check: error: --policy 'cli_nan:p': policy cli_nan: timeout_s(CPU, 8) "
             "returned nan",),
            files=returning("cli_nan", "float('nan')")),
    Command("policy-zero", ("check", "--policy", "cli_zero:p"),
            ("--policy 'cli_zero:p': policy cli_zero: timeout_s(CPU, 8) returned 0",),
            files=returning("cli_zero", "0")),
    Command("policy-exits", ("check", "--policy", "cli_exit:p"),
            ("--policy 'cli_exit:p': importing 'cli_exit' failed: SystemExit: 1",),
            files=policy_module("cli_exit", "import sys\nsys.exit(1)\n")),
    Command("policy-empty", ("check", "--policy", ""), ("argument --policy: no policy given",)),
    Command("stock-deadline-fraction", ("check", "--stock-deadline", "1.5"),
            ("argument --deadline/--stock-deadline: '1.5' is not a whole number of seconds",)),
    Command("batch-sizes-empty", ("check", "--batch-sizes", ""),
            ("argument --batch-sizes: no batch sizes given",)),
    Command("max-tokens-zero", ("check", "--max-tokens", "0"),
            ("argument --max-tokens: '0' must be at least 1",)),
    # --- output paths: proven at the start, by the one writer ------------------
    Command("report-in-proc", ("check", "--report", "/proc/x.json"),
            ("enginedead check: error: --report '/proc/x.json': cannot be created: making a file in '/proc' "
             "failed", "(/proc is the kernel's; it takes no new files)")),
    Command("report-and-log-one-file", ("check", "--report", "same.json", "--log", "./same.json"),
            ("enginedead check: error: --report 'same.json': names the same file as --log './same.json'; "
             "each output needs a file of its own",)),
    Command("report-fifo", ("check", "--report", "fifo"),
            ("enginedead check: error: --report 'fifo': ", "is a FIFO that nothing reads; writing to it "
             "would wait forever"), nodes={"fifo": "fifo"}),
    Command("log-fifo-check", ("check", "--log", "fifo"), ("--log 'fifo': ", "is a FIFO that nothing reads"),
            nodes={"fifo": "fifo"}),
    Command("log-dangling-dir", ("check", "--log", "gone/check.log"),
            ("--log 'gone/check.log': ", "gone' is a symbolic link to '/nonexistent-enginedead-dir', which "
             "does not exist"), nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    Command("report-dangling-dir", ("check", "--report", "gone/sub/r.json"),
            ("--report 'gone/sub/r.json': ", "is a symbolic link to"),
            nodes={"gone": "link:/nonexistent-enginedead-dir"}),
    # --- deadlines vLLM cannot hold, and what is not a number ------------------------------
    Command("policy-beyond-the-bound", ("check", "--policy", "cli_big:p"),
            ("--policy 'cli_big:p': policy cli_big: timeout_s(CPU, 8) returned 1000000000000.0; a deadline "
             f"must be at most {releases.MAX_DEADLINE_S} s, the longest wait vLLM can make",),
            files=returning("cli_big", "1e12")),
    Command("policy-returns-text", ("check", "--policy", "cli_600:p"),
            ("--policy 'cli_600:p': policy cli_600: timeout_s(CPU, 8) returned '600', not a number of "
             "seconds (str; give an int or a float)",),
            files=returning("cli_600", "'600'")),
    Command("stock-deadline-beyond-the-bound", ("check", "--stock-deadline", "10000000000000"),
            ("argument --deadline/--stock-deadline: '10000000000000' must be at most "
             f"{releases.MAX_DEADLINE_S} s, the "
             "longest wait vLLM can make",)),
    # --- a long model path: its head and tail in the line ----------------------------------
    Command("model-long-path", ("check", "--model", LONG_MODEL),
            ("enginedead check: error: --model ", '"vocab_size": -1 must be at least 1',
             "[long paths shortened; -v shows them whole]"),
            files=model(config(vocab_size=-1), LONG_MODEL)),
    # --- 36.2: the plugin's guard switch, refused in the plugin's words ---------------------------
    Command("env-guard-not-a-switch", ("check", "--guard"),
            ("enginedead check: error: ENGINEDEAD_GUARD='maybe' (from environment): 'maybe' is not a switch; "
             "use 1 or 0",), env={"ENGINEDEAD_GUARD": "maybe"}),
    # --- 37.1: batch sizes within what vLLM builds ----------------------------------------------------
    Command("batch-sizes-over-vllms", ("check", "--batch-sizes", "99999999"),
            ("enginedead check: error: --batch-sizes 99999999: batch size 99999999 is over 4096, the largest "
             "an offline engine takes: vLLM refuses max_num_seqs above max_num_batched_tokens (4096, ",)),
    Command("server-batch-sizes-over-a-servers", ("check", "--server", "--batch-sizes", "8,3000"),
            ("enginedead check: error: --batch-sizes 8,3000: batch size 3000 is over 2048, the largest a "
             "server takes",)),
    # --- 37.2: the model against the harness's context and vLLM's model types --------------------------
    Command("model-context-shorter", ("check", "--model", "m", "--batch-sizes", "2"),
            ("enginedead check: error: --model ", "/m/config.json: the model's context is 16 tokens",
             "shorter than the harness's max_model_len 512: vLLM refuses a longer max_model_len"),
            files=model(config(max_position_embeddings=16))),
    Command("model-type-unknown", ("check", "--model", "m", "--batch-sizes", "2"),
            ("enginedead check: error: --model ", "/m/config.json: \"model_type\": 'nosuchtype' is known to "
             "neither vLLM",), files=model(config(model_type="nosuchtype"))),
    # --- 37.3: the tokenizer a server loads ------------------------------------------------------------
    Command("server-tokenizer-cut-short", ("check", "--server", "--model", "m", "--batch-sizes", "2"),
            ("enginedead check: error: --model ", "/m/tokenizer.json is not valid JSON",
             "vLLM's API server loads it at start"), files=with_tokenizer(BAD_TOKENIZER)),
    # --- 37.4: a plugin list that leaves ours out ------------------------------------------------------
    Command("vllm-plugins-leave-ours-out", ("check", "--batch-sizes", "2"),
            ("enginedead check: error: VLLM_PLUGINS='lora' (from environment) leaves out enginedead",
             "; fix: export VLLM_PLUGINS=lora,enginedead (or unset it)"), env={"VLLM_PLUGINS": "lora"}),
    # --- 37.5: the prompt and --max-tokens within the harness's context, as the handles ask ---------------
    Command("server-max-tokens-over-the-context",
            ("check", "--server", "--max-tokens", "600", "--batch-sizes", "2"),
            ("enginedead check: error: --max-tokens 600: prompt_len=4 + max_tokens=600 + 1 (the tokenizer's "
             "BOS token) is 605 tokens, more than the engine's max_model_len 512; give --max-tokens 507 or "
             "fewer",)),
    Command("max-tokens-over-the-context", ("check", "--max-tokens", "509"),
            ("enginedead check: error: --max-tokens 509: prompt_len=4 + max_tokens=509 is 513 tokens, more "
             "than the engine's max_model_len 512; give --max-tokens 508 or fewer",)),
]


@pytest.mark.processes
@pytest.mark.parametrize("case", COMMAND_CASES, ids=[c.id for c in COMMAND_CASES])
def test_bad_command_line_is_one_line_exit_2(
    tmp_path: Path, no_child_engine: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch, case: Command
) -> None:
    """Each bad ``enginedead check`` command line: one line, exit 2, at once, nothing left."""
    assert_command_is_one_line_exit_2(tmp_path, private_tmp, monkeypatch, case)


@pytest.mark.processes
def test_check_refused_by_pytest_is_exit_2_and_leaves_nothing(
    tmp_path: Path, no_child_engine: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``enginedead check -- --no-such-flag``: the regression run's pytest refuses its arguments
    before any engine; the command says so in one line, exits 2, and its scratch directory
    is gone.  (In-process, with vLLM's presence and registry stubbed: the run is real.)"""
    from pytest_enginedead import command

    monkeypatch.setattr(versions, "installed_version", lambda: "0.32.0")
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    log = tmp_path / "check.log"
    code = command.main(["check", "--log", str(log), "--", "--no-such-flag"])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "pytest refused the run:" in lines[0], lines
    assert "--no-such-flag" in lines[0]
    assert_clean(out + err)
    assert leftovers(private_tmp) == []


def test_check_clears_an_inherited_guard_and_says_so(
    tmp_path: Path, no_child_engine: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """An operator's production ``ENGINEDEAD_GUARD*`` (even a value the guard would refuse) does
    not reach the check's regression run, whose stock runs must stay unguarded: the command
    clears it, the header says which it cleared, and nothing is refused for it."""
    from pytest_enginedead import command
    from pytest_enginedead.commands import check
    from pytest_enginedead.logic.reporting import checking

    shell = {"ENGINEDEAD_GUARD": "1", "ENGINEDEAD_GUARD_HANG_S": "soon", "ENGINEDEAD_BUSY_THRESHOLD": "0.1"}
    env, cleared = check.regression_environment({**shell, "PATH": "/usr/bin"},
                                              checking.plan_for(BUNDLED_MODEL, [8, 64]))
    assert not [k for k in env if k.startswith("ENGINEDEAD_GUARD")]
    assert env["PATH"] == "/usr/bin" and env["ENGINEDEAD_BUSY_THRESHOLD"] == "0.1"  # the others still count
    assert cleared == ["ENGINEDEAD_GUARD='1'", "ENGINEDEAD_GUARD_HANG_S='soon'"]
    for name, value in shell.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(versions, "installed_version", lambda: "0.32.0")
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)
    given: list[dict[str, str]] = []

    def refused_run(cmd: list[str], env: dict[str, str], *args: object) -> tuple[int, bytes]:
        given.append(env)  # the run pytest would have made, refused as pytest refuses an argument
        return 4, b"python -m pytest: error: unrecognized arguments: --no-such-flag\n"

    monkeypatch.setattr(check, "run_logged", refused_run)
    code = command.main(["check", "--log", str(tmp_path / "check.log")])
    out, err = capsys.readouterr()
    assert code == 2, (out, err)  # pytest refused the extra argument: no engine, and not the guard
    assert [k for k in given[0] if k.startswith("ENGINEDEAD_GUARD")] == []
    said = ("enginedead check: cleared ENGINEDEAD_GUARD='1', ENGINEDEAD_GUARD_HANG_S='soon' inherited from "
            "the environment: the stock and policy runs are unguarded (--guard adds a guarded run)")
    assert said in err and said not in out, (out, err)  # progress goes to stderr
    assert_clean(out + err)


# --- the verdict's exit status -------------------------------------------------------------------


def regression_report(verdicts: dict[tuple[int, str], str | None]) -> dict[str, object]:
    """A regression run's report: one call row per (batch, run), its verdict (None: it lived)."""
    tests = [{"nodeid": f"test_regression.py::test_decode_batch[bs{n}-{mode}]", "when": "call",
              "outcome": "failed" if verdict else "passed", "batch_size": n, "timeout_s": 2.0, "steps": 3,
              "step_p50_s": 0.5, "step_max_s": 0.7, "verdict": verdict, "deaths": deaths_written(verdict)}
             for (n, mode), verdict in verdicts.items()]
    return {"tests": tests, "engines_started": 1, "restarts": 0}


STOCK_DIES = {(8, "stock"): None, (8, "policy"): None, (64, "stock"): "SLOW", (64, "policy"): None}


@pytest.mark.parametrize(
    ("verdicts", "pytest_exit", "code", "last"),
    [
        (STOCK_DIES, 1, 0,
         "stock vLLM (2 s deadline): FALSE DEATH at batch 64; policy reference: no false death"),
        ({**STOCK_DIES, (64, "policy"): "SLOW"}, 1, 1, "policy reference: FALSE DEATH at batch 64"),
        ({k: v for k, v in STOCK_DIES.items() if k != (64, "policy")}, 1, 1, "did not run at batch 64"),
        (STOCK_DIES, 2, 2, "policy reference: no false death"),
    ],
    ids=["stock-death-is-no-failure", "policy-death", "a-run-missing", "interrupted"],
)
def test_check_exits_on_its_verdict_not_on_pytests(
    capsys: pytest.CaptureFixture[str], verdicts: dict[tuple[int, str], str | None], pytest_exit: int,
    code: int, last: str,
) -> None:
    """The inner pytest fails the stock run's test (the expected false death); the check exits on
    the verdict line it prints last: 0 unless the policy died falsely or a run is missing, and
    pytest's own status where that says more (interrupted, 2)."""
    from pytest_enginedead.command import build_parser
    from pytest_enginedead.commands import check

    args = build_parser().parse_args(["check"])
    plan = check.plan_of(args)
    assert check.judged(args, plan, regression_report(verdicts), pytest_exit, "/tmp/x.log") == code
    out = capsys.readouterr().out.splitlines()
    assert last in out[-1] and out[-2].startswith("engines started: 1 (0 restarts after a death); log: ")


# --- 36.2: the same words as the plugin ---------------------------------------------------------------


@pytest.mark.processes
def test_check_and_calibrate_refuse_the_guard_switch_in_the_plugins_words(
    tmp_path: Path, no_child_engine: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch,
    downstream: Downstream,
) -> None:
    """``ENGINEDEAD_GUARD=maybe``: the plugin refuses it in one line; ``check`` and ``calibrate`` refuse
    it with the same words after their own name, exit 2, before anything starts."""
    monkeypatch.setenv("ENGINEDEAD_GUARD", "maybe")
    downstream.copy(examples.PLAIN)
    plugin = usage_line(downstream.run()).removeprefix("ERROR: enginedead: ")
    assert plugin == "ENGINEDEAD_GUARD='maybe' (from environment): 'maybe' is not a switch; use 1 or 0"
    for command in ("check", "calibrate"):
        done = enginedead(command, "--batch-sizes", "2", cwd=tmp_path)
        said = f"enginedead {command}: error: {plugin}\n"
        assert (done.returncode, done.stdout, done.stderr) == (2, "", said)
    assert leftovers(private_tmp) == []


# --- 36.3: a verdict only when every planned run ran ----------------------------------------------------


@pytest.fixture
def checked(no_child_engine: Path, private_tmp: Path, monkeypatch: pytest.MonkeyPatch,
            capfd: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``enginedead check ARGS`` in this process (vLLM's presence and registry stubbed; its pytest runs
    are real, with the import no_engine), its log in the temp dir as a user's: (exit, stdout, stderr)."""
    from pytest_enginedead import command

    monkeypatch.setattr(versions, "installed_version", lambda: "0.32.0")
    monkeypatch.setattr(registry, "known_architectures", lambda: KNOWN)

    def run(*args: str) -> tuple[int, str, str]:
        code = command.main(["check", "--batch-sizes", "2", *args])
        out, err = capfd.readouterr()
        assert_clean(err if "--help" in args else out + err)  # pytest's help names its --tb "Traceback" modes
        assert leftovers(private_tmp) == []  # the log too: a run with nothing to keep keeps nothing
        return code, out, err

    return run


@pytest.mark.processes
def test_check_with_pytest_selecting_no_run_is_refused_naming_the_selection(
    checked: Callable[..., tuple[int, str, str]],
) -> None:
    """``-- -k nomatch``: no run, so no verdict: one line naming the expression, exit 2, before the
    header and before any engine; the same for ``-m``."""
    assert checked("--", "-k", "nomatch") == (
        2, "", "enginedead check: error: -k 'nomatch' selected none of the 2 planned runs (stock, policy at "
               "batch 2); nothing ran\n")
    code, out, err = checked("--", "-m", "slow")
    assert (code, out) == (2, "")
    assert err.startswith("enginedead check: error: -m 'slow' selected none of the 2 ")


@pytest.mark.processes
def test_check_collect_only_shows_the_planned_runs_and_gives_no_verdict(
    checked: Callable[..., tuple[int, str, str]],
) -> None:
    """``-- --collect-only``: pytest's collection on the terminal, no table, no verdict line, and exit 5
    (the epilog says so): never the 0 that reads as "no false death"."""
    code, out, err = checked("--", "--collect-only")
    assert code == 5
    assert "test_regression.py::test_decode_batch[stock-bs2]" in out and "2/4 tests collected" in out
    assert "no false death" not in out + err and "OK" not in out + err
    assert err == ("enginedead check: --collect-only lists the planned runs; none ran, so there is no "
                   "verdict (exit 5)\n")
    from pytest_enginedead.commands import check

    assert "5 no verdict: -- --collect-only" in check.EPILOG


@pytest.mark.processes
def test_check_help_passed_through_is_pytests_help_and_exit(
    checked: Callable[..., tuple[int, str, str]],
) -> None:
    """``-- --help``: pytest's own help on the terminal (this plugin's options in it) and pytest's exit
    status, 0: never the false-death code 1."""
    code, out, err = checked("--", "--help")
    assert code == 0, err
    assert out.startswith("usage: ") and "--enginedead-batch-sizes" in out
    assert err == ""


@pytest.mark.processes
def test_check_refused_by_pytest_leaves_no_log(checked: Callable[..., tuple[int, str, str]]) -> None:
    """``-- --no-such-flag`` with the log in the temp dir (no ``--log``): refused in one line, exit 2,
    and the log it had claimed is not left behind."""
    code, out, err = checked("--", "--no-such-flag")
    assert (code, out) == (2, "")
    assert err == ("enginedead check: error: pytest refused the run: python -m pytest: error: unrecognized "
                   "arguments: --no-such-flag\n")
