"""What ``enginedead check`` makes of the pytest arguments it passes through (after ``--``).

A verdict needs every planned run to run.  So arguments that ask pytest for information
(``--help``) get pytest's own output and exit status, never a verdict; arguments that list
the runs without running them (``--collect-only``) show pytest's collection and exit
``NO_VERDICT``; and any other arguments are tried by a collection first, before the header
and before any engine: pytest refusing them, or their selecting none of the planned runs
(``-k nomatch``), is one line and exit 2.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence

#: pytest's arguments that ask for information, not a run: pytest's output and exit status as they are
INFORMATION = ("-h", "--help", "-V", "--version", "--markers", "--fixtures", "--funcargs",
               "--fixtures-per-test")
#: pytest's arguments that plan the runs without running any: the collection, and no verdict
NO_RUN = ("--collect-only", "--co", "--collectonly", "--setup-plan")
#: check's exit status when no run ran by request (``NO_RUN``): never 0, which reads as "no false death"
NO_VERDICT = 5
#: pytest's exit statuses: a usage error, and nothing collected (or everything deselected)
USAGE_ERROR, NO_TESTS = 4, 5
#: pytest's options that select tests, as a message names them (the short form)
SELECTING = {"-k": "-k", "--keyword": "-k", "-m": "-m", "--deselect": "--deselect"}


def asked_for(pytest_args: Sequence[str], kinds: Sequence[str]) -> str | None:
    """The first of ``kinds`` among the arguments (before a ``--`` of pytest's own), or None."""
    for arg in pytest_args:
        if arg == "--":
            return None
        if arg in kinds:
            return arg
    return None


def selection(pytest_args: Sequence[str]) -> str:
    """How a message names what selected the runs: ``-k 'nomatch'``, or the arguments themselves."""
    said = []
    args = list(pytest_args)
    for i, arg in enumerate(args):
        name, _, value = arg.partition("=")
        if name in SELECTING and value:
            said.append(f"{SELECTING[name]} {value!r}")
        elif arg in SELECTING and i + 1 < len(args):
            said.append(f"{SELECTING[arg]} {args[i + 1]!r}")
        elif arg[:2] in ("-k", "-m") and len(arg) > 2:
            said.append(f"{arg[:2]} {arg[2:]!r}")
    return " and ".join(said) if said else f"the pytest arguments {' '.join(args)!r}"


def usage_error(output: bytes) -> str | None:
    """The ``ERROR: ...`` line pytest printed when it refused its arguments, if it did."""
    lines = output.decode(errors="replace").splitlines()
    found = [ln for ln in lines if ": error: " in ln]  # argparse: "pytest: error: unrecognized ..."
    found += [ln for ln in lines if ln.startswith("ERROR: ") and not ln.startswith("ERROR: usage:")]
    if found:
        return found[0].removeprefix("ERROR: ").strip()
    return None


def tried(cmd: Sequence[str], env: Mapping[str, str], pytest_args: Sequence[str], planned: str) -> str | None:
    """Why the run ``cmd`` cannot give a verdict, found by collecting it (no engine starts), or None.

    ``planned`` names the planned runs for the message ("4 planned runs (stock, policy at batch 8, 64)").
    """
    done = subprocess.run([*cmd, "--collect-only", "-q"], env=dict(env), stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=False)
    if done.returncode == USAGE_ERROR:
        refusal = usage_error(done.stdout)
        return f"pytest refused the run: {refusal}" if refusal else None
    if done.returncode == NO_TESTS:
        return f"{selection(pytest_args)} selected none of the {planned}; nothing ran"
    return None
