"""Dummy weights that keep a deep model alive: vLLM's own dummy loader, on a small torch module.

vLLM draws every tensor of a ``--load-format dummy`` model from U(-1e-3, 1e-3), Gemma-4's
per-layer ``layer_scalar`` buffer included; the harness's engines set it back to 1 after the
load (a deep dummy MoE otherwise routes every token to the same experts: docs/explanation/forecast.md).
The loader runs for real, in a fresh process (the wrap patches vLLM's class, and torch stays out
of the test's own process).
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from pytest_enginedead.compat import versions

LOAD = textwrap.dedent("""
    import json, sys
    import torch
    from vllm.config.load import LoadConfig
    from vllm.model_executor.model_loader.dummy_loader import DummyModelLoader
    from pytest_enginedead.vllm_plugin import dummyweights

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(16, 16, bias=False)
            self.register_buffer("layer_scalar", torch.ones(1))
            self.register_buffer("other", torch.ones(1))

    model = torch.nn.Sequential(Layer(), Layer())
    installed = dummyweights.install() if sys.argv[1] == "wrapped" else None
    DummyModelLoader(LoadConfig(load_format="dummy")).load_weights(model, None)
    print(json.dumps({"installed": installed,
                      "scalars": [float(m.layer_scalar) for m in model],
                      "others": [float(m.other) for m in model],
                      "weights_max": max(float(m.proj.weight.abs().max()) for m in model)}))
""")


def _load(mode: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", LOAD, mode], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


@pytest.mark.processes
@pytest.mark.skipif(versions.vllm_missing_reason() is not None, reason="needs vLLM installed")
def test_the_dummy_loader_sets_layer_scalars_to_one_and_nothing_else() -> None:
    stock, wrapped = _load("stock"), _load("wrapped")
    assert all(abs(v) <= 1e-3 for v in stock["scalars"]), stock  # type: ignore[attr-defined]
    assert wrapped["installed"] is True
    assert wrapped["scalars"] == [1.0, 1.0]
    assert all(abs(v) <= 1e-3 for v in wrapped["others"]), wrapped  # type: ignore[attr-defined]
    assert 0 < wrapped["weights_max"] <= 1e-3  # type: ignore[operator]
