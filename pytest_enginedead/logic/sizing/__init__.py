"""What a serving configuration costs on this machine: pure maths over measured steps.

shapes    the serving limits (vLLM's flags), the heaviest step the scheduler can form
          under them, and the requests that make an engine form the steps to measure
fit       the step cost model: fixed + per sequence + per token + per context token
          (per layer type), fitted on recorded steps
slices    a config's layer layout, its depth slices, and what an engine on it needs
forecast  one fit over depth slices, read at the model's full depth
advice    the deadline, the guard's policy and the limits that stay under a deadline

The engine work (one engine per model or slice) is ``calibration.py``'s; nothing here
imports vLLM.
"""

from .advice import Advice, advise
from .fit import Fit, FitError, Step, fit_steps
from .forecast import Forecast, fit_slices
from .shapes import Limits, StepPlan, limits_problem, worst_step
from .slices import Layout, SliceError, layout, slice_config

__all__ = [
    "Advice",
    "Fit",
    "FitError",
    "Forecast",
    "Layout",
    "Limits",
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
