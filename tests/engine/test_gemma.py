"""The original report's model family, shrunk: a real-compute false death, sized on this machine."""

from __future__ import annotations

import json
import re

import psutil
import pytest

from tests.support import examples
from tests.support.downstream import Downstream, assert_nothing_left, engine_processes
from tests.support.machine import GEMMA_MEASURED_AT, Measures, death_sizes
from tests.support.sizing import GEMMA_MOE

pytestmark = pytest.mark.engine

GEMMA = GEMMA_MOE
#: the batch sizes the step cost is measured at, and the most sequences the test may ask for
MEASURED_AT = GEMMA_MEASURED_AT
MOST = 512
#: the call of the MoE block's experts: the decoder layer's ``self.experts(...)`` in 0.32.0,
#: ``self.moe(...)`` in 0.27.1 and 0.28.0, whose ``Gemma4MoE.forward`` calls ``self.experts(...)``
MOE_CALL = re.compile(r"self\.(experts|moe)\(")
#: the model function ``where:`` names: the decoder layer (its MoE call among its lines), or on
#: 0.27.1/0.28.0 the MoE block itself when three quarters of the samples ran inside it
MOE_WHERE = ("Gemma4DecoderLayer.forward", "Gemma4MoE.forward")


@pytest.mark.smoke
@pytest.mark.xdist_group("gemma")  # measured once with the check's and calibrate's Gemma tests
def test_gemma4_moe_decode_batch_outlives_its_deadline(
    downstream: Downstream, bystander: psutil.Process, step_cost: Measures,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No injection.  Sized from this machine's decode steps: a batch that lives under the
    deadline with half of it to spare, then a step of decodes beside newly arrived requests
    sized to take 2.5 deadlines: a false death with the worker in the MoE block — named
    from the worker's own samples and stack at the deadline, not from a stack taken after."""
    sizes = death_sizes(step_cost(GEMMA, MEASURED_AT), most=MOST)
    if isinstance(sizes, str):
        pytest.skip(sizes)
    print(sizes.describe())
    monkeypatch.setenv("ENGINEDEAD_EXAMPLE_SIZES", json.dumps(
        {"deadline": sizes.deadline_s, "living": sizes.living, "dying": sizes.dying}))
    # the preset by name, as a repository without this checkout names it
    result = downstream.copy(examples.GEMMA).run(
        "-rA", f"--enginedead-model={GEMMA.name}", plugins=["timeout"], in_subprocess=True, report=True,
    )
    result.assert_outcomes(failed=1)
    out = result.stdout.str()
    assert "false engine death: vLLM raised EngineDeadError while its worker was still computing" in out
    assert "in burn" not in out  # nothing injected: the model itself
    # where: the MoE block, from the samples the worker took (which function holds three quarters
    # of them, and how the MoE call compares with the dense MLP beside it, depends on the box)
    where = next(line for line in out.splitlines() if line.startswith("  where:"))
    print(where)
    module = "(vllm/model_executor/models/gemma4.py)"
    named = [name for name in MOE_WHERE if f"where:      {name} {module}" in where]
    assert named, where
    assert MOE_CALL.search(where) and "the worker's own stack at the deadline" in where, where
    data = result.report
    assert data is not None
    (test,) = [t for t in data["tests"] if t["when"] == "call"]
    assert test["verdict"] == "SLOW"
    (engine,) = data["engines"]
    assert engine["injection"] == "none" and engine["batch_size"] == sizes.dying
    (death,) = test["deaths"]
    (worker,) = [p for p in death["processes"] if p["step"]]
    # the shaped step, decodes beside newcomers: vLLM may admit the newcomers over several steps
    # (227 of 496 in the first, on a fast box), and any of them the fit says outlives the deadline
    died_at = worker["step"]["batch_size"]
    assert sizes.living < died_at <= sizes.dying, (died_at, sizes)
    assert sizes.cost.predict(died_at) >= sizes.deadline_s, (died_at, sizes)
    found = death["where"]
    assert found["samples"] > 1 and found["model"]["qualname"] in MOE_WHERE, found
    assert any(MOE_CALL.search(line["source"]) and line["samples"] >= 1 for line in found["lines"]), found
    assert_nothing_left(*engine_processes(data), bystander)
