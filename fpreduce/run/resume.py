"""Starting, resuming and checkpointing a run directory (used by :func:`fpreduce.run.runner.run_experiment`).

:func:`plan` decides, reading only, what a run does with its directory (start afresh,
resume, nothing) or refuses; :func:`open_dir` clears a previous run or reads the
checkpoint to continue from; :func:`checkpoint_arrays` is what ``state.npz`` holds:

* ``steps_done``: the steps the checkpoint covers (``metrics.csv`` and ``summary.json``
  are written before it at every step, so they hold at least as many);
* per arm ``i`` (config order; names can hold any character): ``hist/i`` (its ulp
  histogram so far), and in training ``params/i`` and ``state/i/<name>`` (its replica's parameters and optimizer state).

:func:`writing` turns an OSError while writing (a full disk) into a one-line error
that names the file and says how to continue.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal, Protocol

import numpy as np

from fpreduce.base.errors import InvalidArgument
from fpreduce.run import _files, rundir
from fpreduce.run.config import Config, diff, from_dict, parse_toml, to_toml
from fpreduce.run.schema import document

__all__ = ["checkpoint_arrays", "open_dir", "plan", "writing"]


class ArmState(Protocol):
    """What a checkpoint keeps of an arm (the runner's ``_Arm``)."""

    hist: np.ndarray
    params: np.ndarray | None
    state: dict[str, np.ndarray]


def plan(
    d: Path, cfg: Config, *, resume: bool, force: bool, locked: bool = False
) -> Literal["fresh", "resume", "done"]:
    """What a run does with ``d`` (reads only): start afresh, resume, or nothing (resuming a complete run).

    ``locked``: the caller holds ``d``'s lock (else a run holding it is reported first).

    Raises:
        InvalidArgument: ``d`` is not a run directory (:func:`~fpreduce.run.rundir.inspect_run_dir`);
            a run with steps done and no ``force``; ``resume`` with no run or another config.
    """
    if not locked:
        _files.check_free(d)  # a run writing d: say so, rather than judge what it holds
    st = rundir.inspect_run_dir(d)
    if resume:
        if st.holds == "nothing":
            raise InvalidArgument(f"nothing to resume in {d}: no run there")
        text = rundir.read_config(d)
        if text is None:
            raise InvalidArgument(f"nothing to resume in {d}: no config.toml")
        with document(d / rundir.CONFIG_TOML):
            stored = from_dict(parse_toml(text, str(d / rundir.CONFIG_TOML)))
        if stored != cfg:
            raise InvalidArgument(
                f"{d / rundir.CONFIG_TOML} differs from this config ({'; '.join(diff(stored, cfg)[:3])}); "
                f"resume with the run's own config: `fpreduce run --out {shlex.quote(str(d))} --resume`"
            )
        return "done" if st.holds == "complete" else "resume"
    if st.steps_done > 0 and not force:
        if st.holds == "complete":
            raise InvalidArgument(
                f"{d} holds a complete run ({st.steps} steps): replace it with --force, or choose another --out"
            )
        raise InvalidArgument(
            f"{d} holds an incomplete run ({st.steps_done} of {st.steps} steps): continue it with --resume, "
            "replace it with --force, or choose another --out"
        )
    return "fresh"


def open_dir(d: Path, cfg: Config, *, resume: bool) -> tuple[list[dict[str, Any]], int, dict[str, np.ndarray]]:
    """(rows, steps done, checkpoint arrays) to continue from; a fresh start clears ``d`` and writes the config.

    A resume continues from the last checkpoint (``state.npz``, written after the
    metrics and the summary of its step); without a usable one it starts over (the
    same bits, only later).
    """
    if resume:
        _files.remove_leftovers(d, rundir.RUN_FILES)  # the temporaries of a killed writer
        saved = rundir.read_state(d)
        names, k = [a.name for a in cfg.arms], int(saved.get("steps_done", 0))
        try:
            rows = rundir.read_rows(d)[: k * len(names)] if k else []
        except InvalidArgument:
            rows = []
        if k and _usable(saved, rows, names, k, training=cfg.source.kind == "model"):
            return rows, k, saved
    with writing(d):
        rundir.clear_run(d)
        rundir.write_config(d, to_toml(cfg))
    return [], 0, {}


def _usable(
    saved: dict[str, np.ndarray], rows: list[dict[str, Any]], names: list[str], k: int, *, training: bool
) -> bool:
    """Whether a checkpoint of ``k`` steps has every array it needs and ``rows`` are its steps' rows, in order."""
    keys = [f"{w}/{i}" for i in range(len(names)) for w in ("hist", *(("params",) if training else ()))]
    if len(rows) != k * len(names) or any(key not in saved for key in keys):
        return False
    return all(r["arm"] == names[j % len(names)] and r["step"] == j // len(names) for j, r in enumerate(rows))


def checkpoint_arrays(arms: Sequence[ArmState], steps_done: int, training: bool) -> dict[str, np.ndarray]:
    """state.npz: steps done, and per arm (by index) what the runner carries from step to step."""
    z = {"steps_done": np.array(steps_done, dtype=np.int64)}
    for i, a in enumerate(arms):
        z[f"hist/{i}"] = a.hist
        if training:
            z[f"params/{i}"] = a.params  # type: ignore[assignment]
            z.update({f"state/{i}/{k}": v for k, v in a.state.items()})
    return z


@contextlib.contextmanager
def writing(d: Path) -> Iterator[None]:
    """An OSError while writing the run (disk full, ...) as an InvalidArgument naming the file and the way on."""
    try:
        yield
    except OSError as err:
        where = err.filename or d
        raise InvalidArgument(
            f"cannot write {where}: {err.strerror or err}; the run in {d} is kept as it was at its last step: "
            f"continue it with `fpreduce run --out {shlex.quote(str(d))} --resume`"
        ) from None
