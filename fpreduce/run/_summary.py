"""One arm's entry of ``summary.json``: its spec and its aggregates over the steps of ``metrics.csv``.

Every aggregate is a function of the arm's columns (and its ulp histogram), so a
resumed run, whose earlier rows are read back from metrics.csv, gets the same entry
as one run in one go; in particular ``reproducible`` derives from ``rerun_diff_frac``
over all steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fpreduce.core.formats import get_format
from fpreduce.run.config import ArmSpec, Config
from fpreduce.run.stepmetrics import ULP_EDGES


def wider(a: str, b: str) -> str:
    """The wider of two formats (more precision, then more range): the format a pair is compared in."""
    fa, fb = get_format(a), get_format(b)
    return a if (fa.precision, fa.emax) >= (fb.precision, fb.emax) else b


def reproducible(rerun_diff_frac: np.ndarray) -> bool | None:
    """True when no step's re-run changed a bit, False when one did, None with no finite value."""
    v = np.asarray(rerun_diff_frac, dtype=np.float64)
    v = v[np.isfinite(v)]
    return None if v.size == 0 else bool(np.all(v == 0))


def arm_summary(
    spec: ArmSpec,
    cfg: Config,
    cols: dict[str, np.ndarray],
    hist: np.ndarray,
    first: tuple[int | None, int | None],
) -> dict[str, Any]:
    """The summary.json entry of arm ``spec`` from its metrics columns over the steps done.

    ``first`` is (the first step whose result differs from the ``compare_to`` arm's,
    the first step whose parameters do).
    """

    def stat(name: str, fn: Callable[[np.ndarray], Any]) -> Any:
        v = cols.get(name)
        if v is None or v.size == 0 or np.all(np.isnan(v)):
            return None
        return float(fn(v[~np.isnan(v)]))

    partner = next(a for a in cfg.arms if a.name == (spec.compare_to or spec.name))
    return {
        "name": spec.name,
        "order": spec.order,
        "input": spec.input,
        "accumulate": spec.accumulate,
        "output": spec.out_format,
        "rounding": spec.rounding,
        "algorithm": spec.algorithm,
        "average": spec.average,
        "compare_to": partner.name,
        "compared_in": wider(spec.out_format, partner.out_format),
        "reproducible": reproducible(cols.get("rerun_diff_frac", np.array([]))),
        "first_divergence_step": first[0],
        "first_param_divergence_step": first[1],
        "mean_diff_frac": stat("diff_frac", np.mean),
        "median_diff_frac": stat("diff_frac", np.median),
        "max_ulp": stat("ulp_max", np.max),
        "mean_rerun_diff_frac": stat("rerun_diff_frac", np.mean),
        "max_rerun_ulp": stat("rerun_ulp_max", np.max),
        "mean_err_norm": stat("err_norm", np.mean),
        "max_err_norm": stat("err_norm", np.max),
        "max_err_backward": stat("err_backward", np.max),
        "max_err_ulp": stat("err_max_ulp", np.max),
        "mean_err_rel": stat("err_mean_rel", np.mean),
        "max_err_rel": stat("err_max_rel", np.max),
        "mean_frac_correct": stat("frac_correct", np.mean),
        "final_loss": stat("loss", lambda v: v[-1]),
        "final_param_dist": stat("param_dist", lambda v: v[-1]),
        "ulp_hist": {"edges": ULP_EDGES, "counts": [int(x) for x in hist]},
    }
