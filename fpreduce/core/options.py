"""The closed sets among ``reduce``'s options, as types: the summation algorithm, the averaging, the result.

Names arrive as strings at the edge (the API, a TOML file, the command line) and are
parsed once, with a close-match hint on a typo; inside, the typed values travel.
The rounding mode is the enum :class:`fpreduce.core.rounding.Mode`.

>>> get_algorithm("kahan"), AVERAGES[0]
('kahan', 'none')
"""

from __future__ import annotations

from typing import Literal, get_args

from fpreduce.base.errors import unknown_name

__all__ = [
    "ALGORITHMS",
    "AVERAGES",
    "RESULTS",
    "Algorithm",
    "Average",
    "Result",
    "get_algorithm",
    "get_average",
    "get_result",
]

#: ``plain`` (the plan's tree), ``kahan`` / ``neumaier`` (compensated, along the plan's
#: leaf order), ``binned`` (reproducible: order independent), ``exact`` (rounded once)
Algorithm = Literal["plain", "kahan", "neumaier", "binned", "exact"]
ALGORITHMS: tuple[Algorithm, ...] = get_args(Algorithm)

#: ``none``; ``after`` (sum, then one division); ``premultiply`` (x * round(1/N) in the
#: input format, NCCL's Avg); ``predivide`` (x / N in the input format, as torch's
#: ``allreduce_hook``: ``tensor.div_(N)``); ``ddp`` (what PyTorch DDP does without a comm
#: hook: x * float32(1/N) computed in float32, rounded to the gradient's format)
Average = Literal["none", "after", "premultiply", "predivide", "ddp"]
AVERAGES: tuple[Average, ...] = get_args(Average)

#: what a reduction hands back: ``float`` (float32, float64 for fp64: every format's values as numpy
#: holds them) or ``native`` (the result format's own dtype: numpy float16/32/64, ml_dtypes bfloat16 and
#: float8, float32 for tf32; a torch tensor of that dtype when given a torch tensor)
Result = Literal["float", "native"]
RESULTS: tuple[Result, ...] = get_args(Result)


def get_algorithm(name: str) -> Algorithm:
    """The algorithm called ``name``; InvalidArgument with a close-match hint if there is none.

    >>> get_algorithm("kahn")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fpreduce.base.errors.InvalidArgument: unknown algorithm 'kahn'; did you mean 'kahan'? (choices: ...)
    """
    if name not in ALGORITHMS:
        raise unknown_name("algorithm", name, ALGORITHMS)
    return name  # type: ignore[return-value]


def get_average(name: str) -> Average:
    """The averaging called ``name``; InvalidArgument with a close-match hint if there is none."""
    if name not in AVERAGES:
        raise unknown_name("average", name, AVERAGES)
    return name  # type: ignore[return-value]


def get_result(name: str) -> Result:
    """The result kind called ``name``; InvalidArgument with a close-match hint if there is none.

    >>> get_result("nativ")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    fpreduce.base.errors.InvalidArgument: unknown result 'nativ'; did you mean 'native'? (choices: float, native)
    """
    if name not in RESULTS:
        raise unknown_name("result", name, RESULTS)
    return name  # type: ignore[return-value]
