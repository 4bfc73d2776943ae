"""Where a worker was: faulthandler dumps read for the main thread, the model frame and its lines."""

from __future__ import annotations

from typing import Any

from pytest_enginedead.harness.judging.stacks import innermost_frames, short_path, where
from tests.support.standins import STACK_DUMP

# --- the pieces of the message --------------------------------------------------------------


def test_innermost_frames_are_the_main_threads() -> None:
    """The thread named by the ``main-thread`` line, wherever faulthandler lists it."""
    frames = innermost_frames(STACK_DUMP)
    assert frames == [
        "Current thread 0x00007f00000000aa (most recent call first)",
        'File "/site/pytest_enginedead/worker.py", line 82 in burn',
        'File "/site/pytest_enginedead/worker.py", line 111 in run_step',
        'File "/site/vllm/v1/worker/worker_base.py", line 300 in execute_model',
    ]
    assert innermost_frames(STACK_DUMP, frames=1) == frames[:2]
    other_main = STACK_DUMP.replace("main-thread 0x00007f00000000aa", "main-thread 0x00007f00000000bb")
    assert innermost_frames(other_main)[1].endswith("line 320 in wait")


def test_innermost_frames_without_a_main_thread_line_show_the_first_thread() -> None:
    dump = STACK_DUMP.split("\n", 1)[1]
    assert innermost_frames(dump)[0] == "Thread 0x00007f00000000bb (most recent call first)"
    assert innermost_frames("") == [] and innermost_frames("main-thread 0x1\nno dump\n") == []


MODEL_SOURCE = """\
class FakeDecoderLayer:
    def forward(self, x):
        x = self.attn(x)
        return self.experts(x, self.router(x))


def helper(x):
    return x
"""


def test_where_names_the_deepest_model_frame_with_its_class_and_line(tmp_path: Any) -> None:
    """The innermost frame in the model's own module, named by class and method with its
    source line; the innermost vLLM frame beside it; torch's frames never."""
    models = tmp_path / "site" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    module = models / "fake.py"
    module.write_text(MODEL_SOURCE)
    dump = f"""main-thread 0x00007f00000000aa
Current thread 0x00007f00000000aa (most recent call first):
  File "/site/torch/_ops.py", line 1279 in __call__
  File "/site/vllm/model_executor/layers/fused_moe/layer.py", line 1600 in forward
  File "/site/torch/nn/modules/module.py", line 1786 in _call_impl
  File "{module}", line 4 in forward
  File "{module}", line 8 in helper
  File "/site/vllm/v1/worker/gpu_model_runner.py", line 3100 in execute_model
"""
    found = where(dump, "the worker's own stack at the deadline (step 7 execute_model, 1.00 s in)")
    assert found is not None and found.model is not None
    assert (found.model.qualname, found.model.line) == ("FakeDecoderLayer.forward", 4)
    assert found.model.source == "return self.experts(x, self.router(x))"
    assert found.innermost == "vllm/model_executor/layers/fused_moe/layer.py in forward"
    assert found.describe() == (
        "FakeDecoderLayer.forward (vllm/model_executor/models/fake.py:4): "
        "return self.experts(x, self.router(x)); "
        "innermost vllm/model_executor/layers/fused_moe/layer.py in forward; "
        "the worker's own stack at the deadline (step 7 execute_model, 1.00 s in)"
    )
    # a module function keeps its plain name; no model frame at all is said so
    only_helper = dump.replace(f'  File "{module}", line 4 in forward\n', "")
    helper = where(only_helper, "x")
    assert helper is not None and helper.model is not None and helper.model.qualname == "helper"
    burn = where(STACK_DUMP, "x")
    assert burn is not None and burn.model is None
    assert burn.describe() == "pytest_enginedead/worker.py in burn (no model code on the stack); x"
    assert where("main-thread 0x1\nno dump\n", "x") is None


def test_where_counts_the_samples_before_the_deadline(tmp_path: Any) -> None:
    """Over the samples of the step until the deadline, the model function they ran under
    and its lines by count, whatever the one instant at the deadline shows: not one lucky
    frame."""
    from pytest_enginedead.contract.dumps import sample_block

    models = tmp_path / "site" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    module = models / "fake.py"
    module.write_text(MODEL_SOURCE)

    def at(line: int, inner: str) -> list[str]:
        return [f'  File "/site/vllm/model_executor/layers/{inner}.py", line 9 in forward',
                f'  File "{module}", line {line} in forward',
                '  File "/site/vllm/v1/worker/gpu_model_runner.py", line 3100 in execute_model']

    samples = [sample_block(0.4 - 0.1 * i, at(4, "fused_moe/layer")) for i in range(3)]
    samples.insert(1, sample_block(0.35, at(3, "attention")))
    head = "main-thread 0x1\nCurrent thread 0x1 (most recent call first):\n"
    at_deadline = head + "\n".join(at(3, "attention"))
    found = where(at_deadline, "how", samples)
    assert found is not None and found.model is not None
    # every sample ran under the layer's forward: 3 at its MoE line, 2 at its attention line
    assert (found.model.line, found.count, found.total) == (4, 5, 5)
    assert [(f.line, n) for f, n in found.shares] == [(4, 3), (3, 2)]
    assert found.innermost == "vllm/model_executor/layers/fused_moe/layer.py in forward"
    assert found.describe().startswith(
        "FakeDecoderLayer.forward (vllm/model_executor/models/fake.py) in 5 of 5 samples, at "
        ":4 return self.experts(x, self.router(x)) in 3, :3 "
    ), found.describe()
    assert found.to_dict()["lines"][0] == {
        "line": 4, "source": "return self.experts(x, self.router(x))", "samples": 3}


def test_short_path_starts_at_the_package() -> None:
    assert short_path("/a/site-packages/vllm/model_executor/x.py") == "vllm/model_executor/x.py"
    assert short_path("/src/pytest_enginedead/worker.py") == "pytest_enginedead/worker.py"
    assert short_path("/elsewhere/x.py") == "/elsewhere/x.py"


LAYER_SOURCE = """\
class FakeMLP:
    def forward(self, x):
        return self.down_proj(self.gate_up_proj(x))


class FakeDecoderLayer:
    def forward(self, x):
        x = self.attn(x)
        y = self.mlp(x)
        return y + self.experts(x, self.router(x))
"""


def test_where_names_the_layer_most_samples_ran_under_with_its_lines(tmp_path: Any) -> None:
    """Samples split between a dense MLP (a function of its own, deeper) and the MoE call
    in the layer: the layer's forward is named, in every sample, with its lines by count —
    the MLP's call and the MoE block both listed, whichever box makes which one larger."""
    from pytest_enginedead.contract.dumps import sample_block

    models = tmp_path / "site" / "vllm" / "model_executor" / "models"
    models.mkdir(parents=True)
    module = models / "fake.py"
    module.write_text(LAYER_SOURCE)
    runner = '  File "/site/vllm/v1/worker/gpu_model_runner.py", line 3100 in execute_model'

    def layer_at(line: int, *inner: str) -> list[str]:
        return [*inner, f'  File "{module}", line {line} in forward', runner]

    mlp = layer_at(9, f'  File "{module}", line 3 in forward')
    moe = layer_at(10, '  File "/site/vllm/model_executor/layers/fused_moe/layer.py", line 9 in forward')
    attn = layer_at(8, '  File "/site/vllm/model_executor/layers/attention.py", line 5 in forward')
    samples = [sample_block(1.0 - 0.05 * i, s) for i, s in enumerate([mlp] * 5 + [moe] * 3 + [attn])]
    stack = "main-thread 0x1\nCurrent thread 0x1 (most recent call first):\n" + "\n".join(moe)
    found = where(stack, "how", samples)
    assert found is not None and found.model is not None
    assert (found.model.qualname, found.count, found.total) == ("FakeDecoderLayer.forward", 10, 10)
    assert [(f.line, n) for f, n in found.shares] == [(9, 5), (10, 4), (8, 1)]
    text = found.describe()
    assert ":9 y = self.mlp(x) in 5, :10 return y + self.experts(x, self.router(x)) in 4" in text, text
