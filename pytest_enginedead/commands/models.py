"""``enginedead models``: the model presets shipped with the package, and where each lies.

A preset is a model's config (and a tokenizer where it serves text) with no weights: engines
load it with dummy weights.  ``enginedead models NAME`` prints the preset's directory alone,
for a command that wants a model directory rather than a name (vLLM's own server):
``--model "$(enginedead models tiny-llama)" --load-format dummy``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from ..logic.inputs.modelconfig import preset_summary, presets, read_config
from .common import Refused, add_verbose

EPILOG = ("exit status: 0 listed (or the directory printed); 2 bad usage: no preset of that name.  "
          "Reads nothing from the environment.")


def add_parser(sub: Any, verbose: bool) -> None:
    mod = sub.add_parser("models", help="the model presets (configs shipped with the package), their paths",
                         description="List the model presets --model takes by name (configs shipped with the "
                         "package; engines run them with dummy weights), or print one preset's directory: "
                         "what vLLM's own commands take as --model (with --load-format dummy).",
                         epilog=EPILOG)
    mod.verbose = verbose
    mod.add_argument("name", nargs="?", metavar="NAME",
                     help="print this preset's directory alone (e.g. for vLLM's server: "
                     "--model \"$(enginedead models tiny-llama)\" --load-format dummy)")
    mod.add_argument("--json", action="store_true", help="print the presets as JSON")
    add_verbose(mod)


def run(args: argparse.Namespace) -> int:
    found = presets()
    if args.name is not None:
        if args.name not in found:
            raise Refused(f"no preset is named {args.name!r}; the presets: {', '.join(found) or 'none'}")
        print(json.dumps({args.name: found[args.name]}) if args.json else found[args.name])
        return 0
    listed = {name: {"directory": directory,
                     "summary": preset_summary(read_config(Path(directory) / "config.json"))}
              for name, directory in found.items()}
    if args.json:
        print(json.dumps(listed, indent=2))
        return 0
    for name, info in listed.items():
        print(f"{name:<18} {info['summary']}")
        print(f"{'':<18} {info['directory']}")
    print("use: --model NAME with any enginedead command or the plugin; "
          "--model \"$(enginedead models NAME)\" --load-format dummy with vLLM's own")
    return 0
