"""What an xdist worker tells the controller: its collection's plan, and how its session ended.

The plan goes in a side file of the worker's own (``WorkerPlan``: the controller's scheduler
and its model check read it); how a session ended goes in ``workeroutput`` (``WorkerEnded``).
Each is JSON only there, written by its ``to_json``/``to_wire`` and read back by its
``from_json``/``from_wire``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EngineUses:
    """What the planned engine tests start, which decides what of the model is checked."""

    #: the fixtures' engines (started with the harness's max_model_len)
    fixtures: bool = True
    #: an API server (it loads the model's tokenizer)
    servers: bool = False


@dataclass(frozen=True)
class WorkerPlan:
    """A worker's collection: each test's scheduling group, and what its engine tests need."""

    #: nodeid -> xdist group (the tests of one engine configuration share one)
    groups: Mapping[str, str] = field(default_factory=dict)
    #: how many engine tests it planned (the controller checks the model when there are any)
    engine_tests: int = 0
    uses: EngineUses = EngineUses(fixtures=False)
    #: a test of the plugin's was collected (the run's header is said)
    plugin_tests: bool = False

    def to_json(self) -> str:
        return json.dumps({"groups": dict(self.groups), "engine_tests": self.engine_tests,
                           "uses": {"fixtures": self.uses.fixtures, "servers": self.uses.servers},
                           "plugin_tests": self.plugin_tests})

    @classmethod
    def from_json(cls, text: str) -> WorkerPlan:
        """A plan as ``to_json`` wrote it; ``ValueError`` (``KeyError``, ``TypeError``) otherwise."""
        data = json.loads(text)
        uses = data["uses"]
        return cls({str(k): str(v) for k, v in data["groups"].items()}, int(data["engine_tests"]),
                   EngineUses(bool(uses["fixtures"]), bool(uses["servers"])), bool(data["plugin_tests"]))


@dataclass(frozen=True)
class WorkerEnded:
    """A worker's session ended by a usage error (its lines) or ``pytest.exit`` (its message)."""

    usage: tuple[str, ...] = ()
    exit_message: str | None = None
    returncode: int | None = None

    def to_wire(self) -> dict[str, Any]:
        """As ``workeroutput`` carries it (execnet sends plain data only)."""
        return {"usage": list(self.usage), "exit": self.exit_message, "returncode": self.returncode}

    @classmethod
    def from_wire(cls, data: Mapping[str, Any] | None) -> WorkerEnded | None:
        if not data:
            return None
        code = data.get("returncode")
        return cls(tuple(str(a) for a in data.get("usage") or ()), data.get("exit"),
                   None if code is None else int(code))
