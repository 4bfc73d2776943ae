"""Every ``ENGINEDEAD_*`` variable the harness and the code inside vLLM read, in one place,
and the exit codes a serving process ends with after its engine died.

The options' own variables (``ENGINEDEAD_BATCH_SIZES`` ...) are named by their option
(``pytest_plugin.options.OPTIONS``: the ini key in upper case).
"""

from __future__ import annotations

#: Set in an engine's environment: the run directory (the worker plugin is inert without it).
ENV_DIR = "ENGINEDEAD_WORKER_DIR"

#: The harness's own pid: the plugin never activates in the harness process itself.
ENV_HARNESS_PID = "ENGINEDEAD_HARNESS_PID"

#: Where the guard writes its state outside the harness (inside, it goes to the run directory).
STATE_DIR_ENV = "ENGINEDEAD_GUARD_STATE_DIR"

#: Set by the serving process for the engine cores it starts: whose engine they are.
ENV_FRONT_PID = "ENGINEDEAD_FRONT_PID"

#: The plugin's figures on vLLM's own ``/metrics`` (``contract.metricsfile``): ``1`` turns them on without the
#: guard, ``0`` off; unset, they follow the guard.
METRICS_ENV = "ENGINEDEAD_METRICS"

#: Set by the serving process for the engine cores it starts: which server's metrics they keep (``p8000``: the
#: server on port 8000, across its restarts).
METRICS_KEY_ENV = "ENGINEDEAD_METRICS_KEY"

#: Ranks on several machines: a directory every node can reach, where each rank publishes its
#: progress (``contract.progress``) and the harness and the guard read the other nodes' ranks.
PROGRESS_DIR_ENV = "ENGINEDEAD_PROGRESS_DIR"


#: ``0`` in an engine's environment: its workers keep no per-layer progress (``contract.stepprogress``);
#: the judge then decides by CPU inside the layers too, and a spinning worker reads as computing.
LAYERS_ENV = "ENGINEDEAD_LAYER_PROGRESS"


#: The guard: on (1), its policy (the hard cap), its idle grace in seconds (default 60, at least
#: 0.25: the guard looks at the worker every 0.25 s).
GUARD_ENV = "ENGINEDEAD_GUARD"
GUARD_POLICY_ENV = "ENGINEDEAD_GUARD_POLICY"
GUARD_HANG_ENV = "ENGINEDEAD_GUARD_HANG_S"

#: The pytest option ``--enginedead-policy``'s variable (its option names it too): not the
#: guard's, which a production guard says when it is set in its place.
POLICY_OPTION_ENV = "ENGINEDEAD_POLICY"

#: Extra directories (os.pathsep list) to import a ``module:attr`` guard policy from.
GUARD_PATH_ENV = "ENGINEDEAD_GUARD_PATH"

#: Every variable of the guard's: the harness sets each for an engine it starts, or clears it.
GUARD_VARIABLES = (GUARD_ENV, GUARD_POLICY_ENV, GUARD_HANG_ENV, GUARD_PATH_ENV)


#: ``1``: the serving process exits non-zero after its engine died (70, or 71 when the guard ended a
#: hung step); unset, vLLM's 0.  Only this variable turns it on: ``ENGINEDEAD_GUARD`` does not.
EXIT_ENV = "ENGINEDEAD_EXIT_ON_DEATH"

#: The serving process's status after its engine died of anything but a hang.
EXIT_DEAD = 70

#: The serving process's status after the guard ended a hung step.
EXIT_HUNG = 71


#: Tests only: the engine core writes which vLLM attributes the plugin replaced here.
PATCHES_ENV = "ENGINEDEAD_REPORT_PATCHES"


#: What ``enginedead check`` hands its inner pytest run: the plan (JSON), where progress goes.
CHECK_PLAN_ENV = "ENGINEDEAD_CHECK_PLAN"
CHECK_PROGRESS_ENV = "ENGINEDEAD_CHECK_PROGRESS"


#: The conformance suite (``pytest --pyargs pytest_enginedead.conformance``): your probe's
#: settings, ``NAME=PERIOD/TIMEOUT/THRESHOLD,...``
PROBE_SETTINGS_ENV = "ENGINEDEAD_PROBE_SETTINGS"
#: The conformance suite: the kind of probe held to them (``probe``, ``health``, ``models``,
#: ``completion``)
PROBE_KIND_ENV = "ENGINEDEAD_PROBE_KIND"
#: The conformance suite: how long each state is probed, in seconds
PROBE_WINDOW_ENV = "ENGINEDEAD_PROBE_WINDOW"
#: The conformance suite: the guard's hang_s in the guarded runs, in seconds
PROBE_HANG_ENV = "ENGINEDEAD_PROBE_HANG_S"


#: the file every start appends its line to (unset: nothing is written)
START_LEDGER_ENV = "ENGINEDEAD_START_LEDGER"

#: what the line names as the start's origin, e.g. the outer test that ran the inner suite
START_LEDGER_TAG_ENV = "ENGINEDEAD_START_LEDGER_TAG"
