"""fpreduce: bit-exact emulation and measurement of floating-point reduction order effects."""

from fpreduce import plans
from fpreduce._errors import InvalidArgument
from fpreduce._version import __version__
from fpreduce.engine import reduce, reduce_reference
from fpreduce.exact import ExactSum, exact_sum, exact_sum_mpmath
from fpreduce.formats import FORMATS, Format, from_bits, get_format, to_bits, ulp
from fpreduce.rounding import MODES, Mode, round_to

__all__ = [
    "FORMATS",
    "MODES",
    "ExactSum",
    "Format",
    "InvalidArgument",
    "Mode",
    "__version__",
    "exact_sum",
    "exact_sum_mpmath",
    "from_bits",
    "get_format",
    "plans",
    "reduce",
    "reduce_reference",
    "round_to",
    "to_bits",
    "ulp",
]
