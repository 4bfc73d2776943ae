"""Sizing a serving configuration: what its steps cost on this machine, and what to set.

The area, in the order a sizing run goes through it:

plan      what a run needs before any engine starts: the runs, the engines (the model or
          its depth slices), their memory; refusals in one line
shapes    vLLM's serving limits, the heaviest step its scheduler can form under them, and
          the requests that make an engine form the steps to measure
kvcache   the KV cache the server will have, and what a step's requests hold in it
slices    a config's layer layout, its depth slices, the weights and memory they need
(the measurement on an engine: ``harness/measure.py``, the one part that starts vLLM)
terms     what one step is (``Step``) and what each term multiplies, the experts a mixture
          of experts' tokens reach among them (``Routing``)
fit       the step model fitted on measured steps, how sure it is (``Uncertainty``)
joint     the step model over depth slices: a slice's features, the full model's terms
forecast  one fit over every slice's steps, read at the model's full depth
floors    the least a key attended or read can cost, from the shape and measured rates
solve     non-negative least squares with floors, and the bootstrap behind every interval
advice    the deadline, the guard's policy and the limits that stay under a deadline
result    from the engines' records to the typed answer (``answer.SizingAnswer``)
text / jsonout   the answer as a person reads it and as ``--json`` prints it (the plot:
          ``commands/plots.py``)
validation  how far forecasts were from steps they did not see: MAPE, signed error, the
          worst, interval coverage (``bench/sizing.py validate``)
decode / batchbound  the decode-only calibration, and the largest batch a test engine takes

Nothing here imports vLLM.
"""

from .advice import Advice, advise
from .answer import SizingAnswer
from .fit import Fit, FitError, Step, fit_steps
from .forecast import Forecast, fit_slices
from .shapes import Limits, StepPlan, limits_problem, worst_step
from .slices import Layout, SliceError, layout, slice_config
from .terms import Routing

__all__ = [
    "Advice",
    "Fit",
    "FitError",
    "Forecast",
    "Layout",
    "Limits",
    "Routing",
    "SizingAnswer",
    "SliceError",
    "Step",
    "StepPlan",
    "advise",
    "fit_slices",
    "fit_steps",
    "layout",
    "limits_problem",
    "slice_config",
    "worst_step",
]
