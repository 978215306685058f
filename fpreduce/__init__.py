"""fpreduce: bit-exact emulation and measurement of floating-point reduction order effects."""

from fpreduce import plans
from fpreduce._errors import InvalidArgument
from fpreduce._version import __version__
from fpreduce.config import load_config
from fpreduce.engine import reduce, reduce_reference
from fpreduce.exact import ExactSum, exact_sum, exact_sum_mpmath
from fpreduce.experiment import run_experiment
from fpreduce.formats import FORMATS, Format, from_bits, get_format, to_bits, ulp
from fpreduce.outcomes import OrderOutcomes, order_outcomes
from fpreduce.results import Results, load_run
from fpreduce.rounding import MODES, Mode, round_to

__all__ = [
    "FORMATS",
    "MODES",
    "ExactSum",
    "Format",
    "InvalidArgument",
    "Mode",
    "OrderOutcomes",
    "Results",
    "__version__",
    "exact_sum",
    "exact_sum_mpmath",
    "from_bits",
    "get_format",
    "load_config",
    "load_run",
    "order_outcomes",
    "plans",
    "reduce",
    "reduce_reference",
    "round_to",
    "run_experiment",
    "to_bits",
    "ulp",
]
