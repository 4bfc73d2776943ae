"""The engine suite's budget: every engine configuration the suite starts, named, with its starts.

Engine starts are most of the suite's time (~15-90 s each on 2 cores, most of it three
processes importing vLLM).  This list is the decision: each entry names the engine tests
(``tests/engine/<file>::<test>``, every parametrization of it) that start engines, the
configurations they start as the start ledger writes them (``EngineSpec.label()``: ``bs64, model
tiny-llama``; ``*`` matches any text, for sizes a test takes from this machine's steps), and how
many starts that is: one per configuration per run that starts it, plus one restart per death a
later test of that run needs an engine after (a death as a run's last test costs nothing).

Kept three ways:

- the lint stage (``python -m tests.engine_budget``, no vLLM needed): every test marked
  ``engine`` in ``tests/engine/`` must be named here (one that starts nothing says ``starts=0``),
  every test named must exist, and the starts add up to at most ``MAX_STARTS``;
- the fast suite (``tests/unit/test_engine_budget.py``): the same against pytest's own collection;
- the engine suite itself (``tests/conftest.py``): at its end, every start in the ledger must be
  of a configuration its test's entry names, and no entry may start more than it says; a run
  that breaks its budget fails, saying which start and how to name it.

To add an engine test: add an entry (its test, its configurations, its starts, and why they are
needed), and raise ``MAX_STARTS`` by its starts if the suite cannot give them back elsewhere;
``make test-budget`` shows what each start cost.  E.g. a soak test that runs one guarded server::

    Entry(("test_soak.py::test_guard_soak",), ("server, bs64, model tiny-llama, guard (*)",), 1,
          "one guarded server for the whole soak"),
"""

from __future__ import annotations

import ast
import fnmatch
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ENGINE_TESTS = Path(__file__).resolve().parent / "engine"

#: the most engine starts the whole suite may make: ``make test`` within 30 min on a 2-core AVX2
#: box, 20 min on AVX-512; 46 since the compiled engine whose worker spins (issue 53), 47 since the
#: guarded server a real Prometheus scrapes (issue 55: no other server test can lend it a slow window
#: it lives through, they all end in a death)
MAX_STARTS = 47

TINY = "model tiny-llama"
GEMMA = "model gemma-4-moe-mini"
HEAVY = "model heavy-llama"


@dataclass(frozen=True)
class Entry:
    """Engine tests, the configurations they start, and the starts those cost in all."""

    tests: tuple[str, ...]  # "test_file.py::test_name" under tests/engine
    configurations: tuple[str, ...]  # ledger labels; * matches any text
    starts: int  # configurations per run + restarts after a death, on a box where nothing skips
    why: str  # what the starts are for: which deaths restart, which runs repeat a configuration
    #: starts a run may add to ``starts`` and stay in budget: a step measurement a busy neighbour
    #: flattened, taken once more (``tests/engine/conftest.py``); not counted in ``MAX_STARTS``
    again: int = 0

    def names(self, test: str) -> bool:
        """Whether ``test`` (a node id, with parameters or xdist's ``@group``) is one of ours."""
        bare = test.split("@")[0].split("[")[0]
        return any(bare == f"tests/engine/{t}" or bare.endswith(f"/{t}") or bare == t for t in self.tests)

    def holds(self, label: str) -> bool:
        return any(fnmatch.fnmatchcase(label, pattern) for pattern in self.configurations)


SERVER = "server, "
GUARD_REF_3 = "guard (policy reference, hang_s 3 s)"
GUARD_REF_5 = "guard (policy reference, hang_s 5 s)"

BUDGET: tuple[Entry, ...] = (
    # --- the false death and the policy, offline ----------------------------------------------------
    Entry(("test_engine.py::test_the_stock_deadline_kills_the_large_batch_falsely_and_the_policy_lets_it_live",
           "test_engine.py::test_the_false_death_says_what_a_person_needs_at_3_am",
           "test_engine.py::test_the_engine_died_at_its_own_deadline_mid_step",
           "test_engine.py::test_one_engine_served_five_tests_under_their_own_deadlines_and_faults",
           "test_engine.py::test_the_verdict_comes_within_a_fraction_of_the_deadline",
           "test_engine.py::test_the_report_junitxml_and_the_summary_tell_one_story",
           "test_engine.py::test_the_time_breakdown_counts_the_one_start_and_every_step",
           "test_engine.py::test_after_pytests_last_line_only_the_suites_own_atexit_output",
           "test_engine.py::test_the_run_left_nothing_behind_but_the_decoy"),
          (f"bs64, {TINY}",), 1,
          "one run for all nine (stock_vs_policy and shared_engine on one engine; the false death at "
          "batch 64 is its last test)"),
    Entry(("test_engine.py::test_genuine_deaths_propagate",),
          (f"bs4, {TINY}", f"bs4, {TINY}, enforce_eager=False"), 2,
          "the hang is its eager engine's one death (the crash is the factory's); the spin the death of "
          "an engine compiled as vLLM runs on CPU by default (issue 53: progress seen in compiled mode), "
          "the suite's one compiled engine"),
    Entry(("test_engine.py::test_factory_engine_with_explicit_arguments",),
          (f"bs4, {TINY}, max_model_len=256",), 1,
          "the factory's own engine; its crash at step 5 ends it"),
    Entry(("test_engine.py::test_real_compute_outlives_short_deadline",), (f"bs*, {HEAVY}",), 2,
          "heavy-llama's steps measured (enginedead calibrate), then the run whose dying batch they size; "
          "on a box too fast to size it, the measurement only", again=1),
    Entry(("test_engine.py::test_malformed_and_unknown_model_are_usage_errors",), (), 0,
          "refused before any engine starts"),
    # --- the commands -------------------------------------------------------------------------------
    Entry(("test_commands.py::test_check_exit_code_follows_false_deaths_under_the_policy",),
          (f"bs16, {TINY}",), 1,
          "enginedead check: stock and policy runs on one engine, the stock false death last "
          "(--policy vllm-stock: a recorded report, tests/unit/commands/test_recorded_runs.py)"),
    Entry(("test_commands.py::test_check_on_the_reports_model_family",
           "test_commands.py::test_calibrate_on_the_reports_model_family",
           "test_gemma.py::test_gemma4_moe_decode_batch_outlives_its_deadline"),
          (f"bs*, {GEMMA}", f"bs*, {GEMMA}, guard (*)"), 4,
          "the shrunk Gemma-4 measured once for the three (xdist_group gemma); the check's stock and "
          "policy runs, its guarded run; the gemma suite's run; on a box too fast to size them, the "
          "measurement only",
          again=1),
    Entry(("test_commands.py::test_calibrate_tiny_model",), (f"bs64, {TINY}",), 1,
          "enginedead calibrate: one engine"),
    Entry(("test_serving_sizes.py::test_sizing_forms_the_worst_step_the_bound_names",),
          (f"bs16, {TINY}, max_model_len=256, max_num_batched_tokens=256*",), 1,
          "enginedead calibrate sizing"),
    Entry(("test_serving_sizes.py::test_forecast_from_two_slices",),
          ("bs8, model slice-*, max_model_len=512, max_num_batched_tokens=512*",), 2, "two depth slices"),
    Entry(("test_serving_sizes.py::test_a_long_context_forecast_is_the_same_twice",),
          ("bs8, model gemma-4-moe-long, max_model_len=*, max_num_batched_tokens=2048*",), 1,
          "the long-context calibration (issue 45): both rounds of --repeat 2 on one engine"),
    # --- the guard ----------------------------------------------------------------------------------
    Entry(("test_guard.py::test_guard_waits_for_busy_workers_and_gives_up_on_hung_ones",),
          (f"bs64, {TINY}, {GUARD_REF_3}", f"bs64, {TINY}, guard (policy edcap:cap, hang_s 5 s)"), 2,
          "the reference guard (its hang last) and the 4 s cap (its death); the refused guard never starts"),
    Entry(("test_guard.py::test_unset_or_bad_the_guard_touches_nothing_in_vllm",), (), 0,
          "two plain vllm.LLM engines in scripts, outside the harness and its ledger"),
    # --- the API server -----------------------------------------------------------------------------
    Entry(("test_server.py::test_server_false_death",), (f"{SERVER}bs64, {TINY}",), 1,
          "the short server case, its false death its end"),
    Entry(("test_server.py::test_server_false_death_seen_by_clients",),
          (f"{SERVER}bs64, {TINY}", f"{SERVER}bs64, {TINY}, {GUARD_REF_5}"), 2,
          "a server and a guarded one, each ended by its last test's death"),
    Entry(("test_supervisors.py::test_probe_and_exit_status_on_real_servers",),
          (f"{SERVER}bs64, {TINY}, {GUARD_REF_3}*", f"{SERVER}bs8, {TINY}, {GUARD_REF_3}"), 2,
          "two guarded servers at once: a slow one (the factory's explicit arguments) and a hung one"),
    Entry(("test_supervisors.py::test_the_conformance_suite_holds_a_setting_to_both_states",),
          (f"{SERVER}bs64, {TINY}, {GUARD_REF_3}", f"{SERVER}bs8, {TINY}, {GUARD_REF_3}"), 2,
          "the conformance suite measures a SLOW and a HUNG guarded server"),
    # --- xdist, shards, ranks -----------------------------------------------------------------------
    Entry(("test_xdist.py::test_two_workers_one_report",
           "test_shards.py::test_two_shards_start_each_configuration_once_and_merge_to_the_whole"),
          (f"bs64, {TINY}", f"bs4, {TINY}, guard (policy reference, hang_s 60 s)"), 2,
          "one run under two workers for both (xdist_group xdist_suite); the shards are listed, not run"),
    Entry(("test_xdist.py::test_killed_worker_leaves_no_engine",), (f"bs8, {TINY}",), 1,
          "the engine of the killed worker (its re-run on the replacement worker is skipped)"),
    Entry(("test_tensor_parallel.py::test_two_ranks_each_judged_on_their_own",),
          (f"tp2, bs64, {TINY}", f"tp2, bs64, {TINY}, {GUARD_REF_5}", f"{SERVER}tp2, bs64, {TINY}"), 3,
          "plain, guarded and served at two ranks, each ended by its last test's death"),
    Entry(("test_nodes.py::test_two_nodes_each_rank_judged_from_where_it_runs",),
          (f"n2, tp2, bs64, {TINY}", f"n2, tp2, bs64, {TINY}, guard (policy reference, hang_s 15 s)",
           f"{SERVER}n2, tp2, bs64, {TINY}"), 3,
          "plain, guarded and served on two nodes (node 1 headless in a PID namespace), each ended by its "
          "last test's death: the false death, the hung remote rank, the killed node"),
    # --- runs cut short: the cut is the point, one run and one engine each ---------------------------
    Entry(("test_cut_short.py::test_ctrl_c_stops_the_run_at_every_phase",),
          (f"bs8, {TINY}", f"{SERVER}bs8, {TINY}"), 6,
          "mid-step, evidence and teardown, for an engine and for a server; the starting phases are cut "
          "before the start ends"),
    Entry(("test_cut_short.py::test_pytest_timeout_in_mid_step",), (f"bs4, {TINY}",), 1,
          "cut by pytest-timeout"),
    Entry(("test_cut_short.py::test_server_hang_cut_by_pytest_timeout",), (f"{SERVER}bs8, {TINY}",), 1,
          "cut by pytest-timeout"),
    # --- the docs' examples -------------------------------------------------------------------------
    Entry(("test_docs.py::test_a_docs_example_with_an_engine_runs",),
          (f"bs64, {TINY}", f"bs64, {TINY}, {GUARD_REF_5}", f"{SERVER}bs64, {TINY}"), 3,
          "the pages' test files in one run (xdist_group docs): plain, guarded, served"),
    Entry(("test_docs.py::test_there_are_engine_examples",), (), 0, "counts the examples"),
    # --- the guard under traffic ---------------------------------------------------------------------
    Entry(("test_soak.py::test_a_short_soak_loses_nothing_to_a_slow_window_and_ends_the_hang",),
          (f"{SERVER}bs16, {TINY}*",), 1,
          "bench/soak.py's own guarded server (vLLM's server command line, as an operator runs it): a "
          "slow window, then the hang that ends it"),
    # --- what operators scrape -----------------------------------------------------------------------
    Entry(("test_prometheus.py::test_prometheus_records_what_the_guarded_server_counted",),
          (f"{SERVER}bs16, {TINY}, {GUARD_REF_5}*",), 1,
          "one guarded server scraped by a real Prometheus through a slow window (issue 55); it ends alive"),
)


# --- the checks ---------------------------------------------------------------------------------


def _marks_engine(node: ast.AST) -> bool:
    return "mark.engine" in ast.unparse(node).replace(" ", "")


def engine_tests(root: Path = ENGINE_TESTS) -> list[str]:
    """``file::test`` of every test the ``engine`` marker marks (its module's ``pytestmark`` or its
    own decorator), read from the files of the engine suite without importing them."""
    found = []
    for path in sorted(root.glob("test_*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        module = any(isinstance(node, ast.Assign) and _marks_engine(node.value)
                     and any(getattr(t, "id", "") == "pytestmark" for t in node.targets)
                     for node in tree.body)
        found += [f"{path.name}::{node.name}" for node in tree.body
                  if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test")
                  and (module or any(_marks_engine(d) for d in node.decorator_list))]
    return found


def listing_problems(tests: Iterable[str], budget: Sequence[Entry] = BUDGET,
                     max_starts: int = MAX_STARTS) -> list[str]:
    """What is wrong with the list against the suite's tests (``file::test``, node ids welcome)."""
    tests = sorted({t.split("@")[0].split("[")[0].removeprefix("tests/engine/") for t in tests})
    named = [t for e in budget for t in e.tests]
    problems = [f"{t} is an engine test that tests/engine_budget.py does not name: add an Entry with the "
                "engine configurations it starts and their starts (starts=0 if it starts none)"
                for t in tests if t not in named]
    problems += [f"tests/engine_budget.py names {t}, which is no test in tests/engine/" for t in named
                 if t not in tests]
    problems += [f"tests/engine_budget.py names {t} in {n} entries" for t in sorted(set(named))
                 if (n := named.count(t)) > 1]
    total = sum(e.starts for e in budget)
    if total > max_starts:
        problems.append(f"the entries add up to {total} engine starts, more than MAX_STARTS {max_starts}: "
                        "give starts back elsewhere, or raise MAX_STARTS and say why")
    return problems


def ledger_problems(entries: Iterable[Mapping[str, Any]], budget: Sequence[Entry] = BUDGET) -> list[str]:
    """Starts in a run's ledger that the list does not allow: a configuration no entry of the
    starting test names, or an entry that started more than its ``starts``."""
    problems = []
    used: dict[Entry, int] = {}
    for start in entries:
        if start.get("event", "start") != "start":
            continue
        test = str(start.get("tag") or start.get("test") or "")
        label = str(start.get("label", ""))
        entry = next((e for e in budget if e.names(test)), None)
        if entry is None:
            if test.split("@")[0].startswith("tests/engine/"):
                problems.append(f"{test} started {label!r}, and tests/engine_budget.py names no such test")
            continue  # a test outside the engine suite (a unit test's refused start is its own business)
        if not entry.holds(label):
            problems.append(f"{test} started {label!r}, a configuration its entry in tests/engine_budget.py "
                            f"does not name ({', '.join(entry.configurations) or 'none'})")
        used[entry] = used.get(entry, 0) + 1
    for entry, n in used.items():
        if n > entry.starts + entry.again:
            allowed = f"{entry.starts}" + (f" (+{entry.again} measured again)" if entry.again else "")
            problems.append(f"{', '.join(entry.tests)} started {n} engines, {allowed} in "
                            f"tests/engine_budget.py ({entry.why})")
    return problems


def main(argv: Sequence[str] = ()) -> int:
    """The lint stage's check: the list against the engine suite's test functions."""
    problems = listing_problems(engine_tests())
    for line in problems:
        print(f"engine budget: {line}", file=sys.stderr)
    if not problems:
        print(f"engine budget: {len(BUDGET)} entries, {sum(e.starts for e in BUDGET)} of {MAX_STARTS} starts")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
