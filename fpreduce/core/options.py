"""The closed sets among ``reduce``'s options, as types: the summation algorithm and the averaging.

Names arrive as strings at the edge (the API, a TOML file, the command line) and are
parsed once, with a close-match hint on a typo; inside, the typed values travel.
The rounding mode is the enum :class:`fpreduce.core.rounding.Mode`.

>>> get_algorithm("kahan"), AVERAGES[0]
('kahan', 'none')
"""

from __future__ import annotations

from typing import Literal, get_args

from fpreduce.base.errors import unknown_name

__all__ = ["ALGORITHMS", "AVERAGES", "Algorithm", "Average", "get_algorithm", "get_average"]

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
