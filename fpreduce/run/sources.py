"""Where the workers' gradients come from: synthetic scenarios, a small model, files.

A source yields, for each step, a float32 array ``X`` of shape ``(workers,
elements)``: row ``w`` is worker ``w``'s gradient. Three kinds:

- ``synthetic`` (:class:`SyntheticSpec`): ``X[w] = scale_t * (signal * s + noise *
  e_w)``, ``s`` a signal shared by all workers and ``e_w`` worker ``w``'s noise,
  both redrawn every step from ``dist``; ``scale_t = exp(-decay * t)`` (gradients
  shrink as training converges; rows are computed in float64 and rounded once to
  float32, so a large decay underflows to subnormals and zeros as fp32 would).
  ``normal``; ``student_t`` (standard t, ``df`` degrees of freedom: heavy tails);
  ``lognormal`` (``exp(N(0, log_sigma^2))`` magnitudes, random signs: swamping);
  ``sparse`` (normal values; each worker keeps each entry with probability ``1 -
  sparsity`` independently, like embedding gradients; dropped entries are +0.0).
  Outlier ``outlier_worker`` (-1: none): ``scale`` multiplies its row by
  ``outlier_scale``; ``corrupt`` replaces it by ``outlier_scale * noise * e'``,
  fresh draws uncorrelated with the signal (a buggy worker: finite garbage);
  ``nan`` makes it all NaN (a diverged worker). Elements are drawn in blocks of
  ``BLOCK`` = 16384 from streams keyed by ``(seed, step, stream, block)``, worker
  after worker: adding workers leaves the first rows unchanged, and any element
  range can be generated alone (the runner works through long vectors in pieces).
- ``model`` (:class:`ModelSpec`): a teacher-student MLP trained data-parallel
  (``ModelSource``, documented in ``fpreduce.run.model``).
- ``file`` (:class:`FileSpec`): gradients dumped from a real run (see below).

Randomness: every draw comes from ``np.random.default_rng([seed, step, stream,
...])``: step ``t`` does not depend on which steps were generated before
(resume-safe); no global RNG. Same seed, same numpy: same bits (numpy's SIMD
``exp``/``log`` and the model's float64 BLAS ``matmul`` may differ in a last bit
between CPUs).

Recorded gradients: the ``file`` layout
--------------------------------------
The ``file`` source reads one array ``(steps, workers, elements)`` (``.npy``, or
``.npz``: key ``grads``, else its first array) or a directory of per-step files
``step_000000.npy``, ``step_000001.npy``, ... ``(workers, elements)`` (:func:`step_files`:
the step is the number; any other ``.npy`` there, hidden or not, is refused, files of other
kinds are never read; the numbers start at 0 without gaps unless ``gaps = true``, which
takes the files in number order). Row ``w`` is rank ``w``'s
*local* gradient, before any all-reduce. ``fpreduce.torch.Recorder`` (a DDP
communication hook) writes this layout as ``REC/grads/`` while your job trains
(``docs/replay.md``; the recording's directory stands for its ``grads/``);
``fpreduce run --source PATH`` reads workers and steps from it. bf16/fp16 gradients
are exact in float32 (numpy has no bf16). For big models dump a fixed slice (a
layer, a random subset of elements).

Files: ``allow_pickle=False`` (object arrays refused); ``.npy`` memory-mapped,
``.npz`` read into memory once. Dtype float16, float32 or float64;
``gradients(t)`` returns float32 (float64 dumps are rounded to nearest fp32, and
values beyond the fp32 range become ±Inf). NaN and ±Inf values are passed
through unchanged, never rejected: the runner records them per step.

>>> src = open_source(SyntheticSpec(elements=8), workers=4, seed=0)
>>> src.gradients(3).shape, src.gradients(3).dtype.name
((4, 8), 'float32')
"""

from __future__ import annotations

import math
import os
import re
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Protocol

import numpy as np
from numpy.typing import NDArray

from fpreduce.base.errors import InvalidArgument
from fpreduce.run._layouts import LAYOUTS
from fpreduce.run._layouts import scales as layout_scales
from fpreduce.run._layouts import total as layout_size
from fpreduce.run.model import ModelSource, ModelSpec, check_step
from fpreduce.run.schema import KindSpec, choice, in_range, is_int, rule, table

__all__ = [
    "STEP_FILE",
    "FileSource",
    "FileSpec",
    "ModelSource",
    "ModelSpec",
    "Source",
    "SourceSpec",
    "SyntheticSource",
    "SyntheticSpec",
    "check_memory",
    "machine_memory",
    "memory_needed",
    "open_source",
    "spec_from_dict",
    "step_file",
    "step_files",
    "step_numbers",
]

DISTS = ("normal", "student_t", "lognormal", "sparse")
OUTLIER_KINDS = ("scale", "corrupt", "nan")
KINDS = ("synthetic", "model", "file")
_ALIASES = {  # other spellings of the choices, for the hint of an unknown value
    "gaussian": "normal",
    "t": "student_t",
    "student": "student_t",
    "studentt": "student_t",
    "log_normal": "lognormal",
    "log-normal": "lognormal",
}
# stream tags of default_rng([seed, step, tag, block]) keys (the model's are >= 1000)
_SIGNAL, _NOISE, _MASK, _CORRUPT = range(4)
#: synthetic gradients are drawn in blocks of this many elements (part of the data's definition)
BLOCK = 1 << 14


@dataclass(frozen=True)
class SyntheticSpec(KindSpec):
    """Synthetic gradients (see the module docstring for the formula).

    Attributes:
        dist: ``normal``, ``student_t``, ``lognormal`` or ``sparse``.
        elements: gradient length (>= 1).
        signal: scale of the shared signal (>= 0).
        noise: scale of the per-worker noise (>= 0).
        df: Student t degrees of freedom (> 0).
        log_sigma: std of log|x| for ``lognormal`` (> 0).
        sparsity: probability that an entry is zero for ``sparse``, in [0, 1).
        outlier_worker: worker index of the outlier, -1 for none.
        outlier_scale: outlier factor (finite).
        outlier_kind: ``scale``, ``corrupt`` or ``nan``.
        decay: scale_t = exp(-decay * t) (>= 0).
        layout: "" or an open model's parameter layout (``fpreduce.run._layouts``: each element scaled by its tensor's).
    """

    kind: ClassVar[str] = "synthetic"
    dist: str = rule("normal", choices=DISTS, aliases=_ALIASES)
    elements: int = rule(4096, lo=1)
    signal: float = rule(1.0, lo=0)
    noise: float = rule(1.0, lo=0)
    df: float = rule(3.0, lo=0, gt=True)
    log_sigma: float = rule(1.0, lo=0, gt=True)
    sparsity: float = rule(0.9, lo=0, hi=1)
    outlier_worker: int = rule(-1, lo=-1)
    outlier_scale: float = 10.0
    outlier_kind: str = rule("scale", choices=OUTLIER_KINDS, aliases=_ALIASES)
    decay: float = rule(0.0, lo=0)
    layout: str = rule("", choices=("", *LAYOUTS))

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.layout:  # (the elements of one model's parameters at most)
            in_range("source.elements", self.elements, 1, hi=layout_size(self.layout) + 1, integer=True)


@dataclass(frozen=True)
class FileSpec(KindSpec):
    """Gradients from a file or directory (layout in the module docstring).

    Attributes:
        path: a ``.npy``/``.npz`` file or a directory of per-step files ``step_NNNNNN.npy``.
        gaps: a directory's step numbers may skip (steps 0, 1, 5, 17 are the run's steps 0..3); by
            default a gap is an error (a lost file, or another recording's).
    """

    kind: ClassVar[str] = "file"
    path: str = rule(nonempty=True)
    gaps: bool = False


SourceSpec = SyntheticSpec | ModelSpec | FileSpec
_SPECS: dict[str, type[SourceSpec]] = {"synthetic": SyntheticSpec, "model": ModelSpec, "file": FileSpec}


def spec_from_dict(d: dict[str, Any]) -> SourceSpec:
    """Build a spec from a ``[source]`` table, dispatching on its ``kind`` (default synthetic)."""
    table("[source]", d)
    kind = d.get("kind", "synthetic")
    choice("source.kind", kind, KINDS, aliases=_ALIASES)
    return _SPECS[str(kind)].from_dict(d)


class Source(Protocol):
    """What every gradient source provides (ModelSource adds the training methods).

    Attributes:
        kind: ``synthetic``, ``model`` or ``file``.
        workers: number of workers (rows).
        elements: gradient length (columns).
        max_steps: number of available steps (files), None if unbounded.
    """

    kind: str
    workers: int
    elements: int
    max_steps: int | None

    def gradients(
        self, step: int, params: NDArray[np.float32] | None = None, *, lo: int = 0, hi: int | None = None
    ) -> NDArray[np.float32]:
        """The workers' gradients of ``step``: float32, shape (workers, hi - lo), elements lo..hi-1."""
        ...


class SyntheticSource(Source):
    """Synthetic gradients from a :class:`SyntheticSpec`."""

    kind = "synthetic"
    max_steps: int | None = None

    def __init__(self, spec: SyntheticSpec, *, workers: int, seed: int) -> None:
        self.spec, self.workers, self.seed, self.elements = spec, workers, seed, spec.elements

    def _draw(self, key: list[int], shape: tuple[int, ...]) -> NDArray[np.float64]:
        """``shape`` draws of ``dist`` (C order) from stream ``key`` (lognormal signs: ``key + [1]``)."""
        sp = self.spec
        rng = np.random.default_rng(key)
        if sp.dist == "student_t":
            return rng.standard_t(sp.df, shape)
        z = rng.standard_normal(shape)
        if sp.dist == "lognormal":
            z *= sp.log_sigma
            np.exp(z, out=z)
            np.negative(z, out=z, where=np.random.default_rng([*key, 1]).random(shape) < 0.5)
        return z

    def gradients(
        self, step: int, params: NDArray[np.float32] | None = None, *, lo: int = 0, hi: int | None = None
    ) -> NDArray[np.float32]:
        """Float32 (workers, hi - lo) gradients of ``step``, elements lo..hi-1 (``params`` is ignored).

        Elements are drawn in blocks of ``BLOCK`` from streams keyed by (seed, step,
        block): asking for a slice gives the same bits as slicing the whole, and
        worker w's rows come before worker w+1's in each stream (adding workers leaves
        the first rows unchanged). Values are computed in float64 and rounded once to
        float32 (nearest-even, overflow to ±Inf); masked ``sparse`` entries are +0.0.
        """
        check_step(step, None)
        lo, hi = _check_range(lo, hi, self.elements)
        out = np.empty((self.workers, hi - lo), dtype=np.float32)
        for b in range(lo // BLOCK, -(-hi // BLOCK)):
            b_lo, b_hi = b * BLOCK, min(self.elements, (b + 1) * BLOCK)
            blk = self._block(step, b, b_hi - b_lo)
            a, e = max(lo, b_lo), min(hi, b_hi)
            out[:, a - lo : e - lo] = blk[:, a - b_lo : e - b_lo]
        return out

    def _block(self, step: int, b: int, m: int) -> NDArray[np.float32]:
        sp, seed, n = self.spec, self.seed, self.workers
        scale = math.exp(-sp.decay * step)

        def key(tag: int) -> list[int]:
            return [seed, step, tag, b]

        Z = self._draw(key(_NOISE), (n, m))
        Z *= scale * sp.noise
        shared = self._draw(key(_SIGNAL), (m,))
        shared *= scale * sp.signal
        Z += shared
        w = sp.outlier_worker
        if 0 <= w < n:
            if sp.outlier_kind == "scale":
                Z[w] *= sp.outlier_scale
            elif sp.outlier_kind == "corrupt":
                Z[w] = self._draw(key(_CORRUPT), (m,))
                Z[w] *= scale * sp.noise * sp.outlier_scale
            else:
                Z[w] = np.nan
        if sp.dist == "sparse":
            Z[np.random.default_rng(key(_MASK)).random((n, m)) < sp.sparsity] = 0.0
        if sp.layout:
            Z *= layout_scales(sp.layout, b * BLOCK, b * BLOCK + m)
        with np.errstate(over="ignore"):
            return Z.astype(np.float32)  # float64 -> float32, nearest-even, overflow -> ±Inf


def _check_range(lo: int, hi: int | None, elements: int) -> tuple[int, int]:
    hi = elements if hi is None else hi
    if not (isinstance(lo, int) and isinstance(hi, int) and 0 <= lo <= hi <= elements):
        raise InvalidArgument(f"element range {lo}..{hi} is outside 0..{elements}")
    return lo, hi


class FileSource(Source):
    """Gradients read from ``.npy``/``.npz`` or a directory of per-step ``.npy`` files."""

    kind = "file"

    def __init__(self, spec: FileSpec, *, workers: int | None) -> None:
        """Open ``spec.path``; ``workers`` None takes the recording's own count."""
        self.spec, self.workers = spec, workers or 0  # 0: the recording's own, set by _check_shape
        path = Path(spec.path)
        if (path / "manifest.json").is_file() and (path / "grads").is_dir():
            path = path / "grads"  # a fpreduce.torch recording: its local gradients
        self._files: list[Path] | None = None
        self._array: Any = None
        self._path, self._layout = path, {}
        if path.is_dir():
            files = step_files(path, gaps=spec.gaps)
            if not files:
                raise InvalidArgument(f"{path}: no step files (step_000000.npy, ...) in this directory")
            self._layout = {f: _npy_header(f, 2) for f in files}
            shape = self._layout[files[0]][0]
            for f in files:
                if self._layout[f][0] != shape:
                    raise InvalidArgument(
                        f"{f}: shape {self._layout[f][0]}, but {files[0].name} has {shape}: every step file holds "
                        "(workers, elements)"
                    )
            self._files, self.max_steps = files, len(files)
            _, self.elements = self._check_shape(path, (len(files), *shape))[1:]
        elif path.is_file():
            if path.suffix == ".npz":
                self._array = _load_npz(path)
            else:
                self._layout = {path: _npy_header(path, 3)}
                self._array = _load(path, mmap_mode="r")
            self.max_steps, _, self.elements = self._check_shape(path, self._array.shape)
        else:
            raise InvalidArgument(f"{path}: no such file or directory")

    def _check_shape(self, path: Path, shape: tuple[int, ...]) -> tuple[int, int, int]:
        if 0 in shape:
            raise InvalidArgument(f"{path}: empty gradients, shape (steps, workers, elements) = {shape}")
        if not self.workers:
            self.workers = shape[1]
        if shape[1] != self.workers:
            raise InvalidArgument(f"{path}: holds {shape[1]} workers but the experiment has workers = {self.workers}")
        return shape[0], shape[1], shape[2]

    def gradients(
        self, step: int, params: NDArray[np.float32] | None = None, *, lo: int = 0, hi: int | None = None
    ) -> NDArray[np.float32]:
        """Float32 (workers, hi - lo) gradients of ``step``, elements lo..hi-1 (float64 rounded to nearest fp32)."""
        check_step(step, self.max_steps)
        lo, hi = _check_range(lo, hi, self.elements)
        f = self._files[step] if self._files is not None else self._path
        if f in self._layout:  # a .npy file: read by offset, never through a mapping a truncation turns into SIGBUS
            if self._files is not None and _npy_header(f, 2) != self._layout[f]:  # the file as it is now
                raise InvalidArgument(f"{f}: changed while the run reads it: shape {_npy_header(f, 2)[0]}")
            a = _read_rows(f, self._layout[f], None if self._files is not None else step, lo, hi)
        else:
            a = self._array[step][:, lo:hi]
        with np.errstate(over="ignore"):
            out = np.array(a, dtype=np.float32)
        if a.dtype.itemsize == 8 and not np.isfinite(out).all():
            _refuse_overflow(f, step, lo, a, out)
        return out


def _read_rows(
    path: Path, layout: tuple[tuple[int, ...], np.dtype[Any], int, bool], step: int | None, lo: int, hi: int
) -> NDArray[Any]:
    """Elements lo..hi-1 of every worker (of ``step`` in a 3-d file) of a .npy file, by reads, never through a
    mapping: a file shorter than its header says (truncated while a run reads it) is a one-line error."""
    shape, dtype, offset, fortran = layout
    workers, size, want = shape[-2], dtype.itemsize, offset + math.prod(shape) * dtype.itemsize
    first = 0 if step is None else step * workers
    out = np.empty((workers, hi - lo), dtype=dtype)
    try:
        with open(path, "rb", buffering=0) as fh:
            have = os.fstat(fh.fileno()).st_size
            if have < want:
                raise InvalidArgument(f"{path}: truncated while the run reads it ({have} bytes, header says {want})")
            if fortran:  # element (s, w, e) at s + S w + S W e: the columns lo..hi-1 of every row, then pick ours
                block = np.empty((hi - lo, *shape[-2::-1]), dtype=dtype)
                fh.seek(offset + lo * math.prod(shape[:-1]) * size)
                got, need = fh.readinto(block.data.cast("B")), block.nbytes
                out[:] = (block if step is None else block[..., step]).T
            for w in [] if fortran else range(workers):
                fh.seek(offset + ((first + w) * shape[-1] + lo) * size)
                got, need = fh.readinto(out[w].data.cast("B")), (hi - lo) * size
                if got != need:
                    break
    except OSError as e:
        raise InvalidArgument(f"{path}: cannot be read ({e.strerror or e})") from None
    if got != need:
        raise InvalidArgument(f"{path}: truncated while the run reads it")
    return out


def _refuse_overflow(path: Path, step: int, lo: int, a: NDArray[Any], out: NDArray[np.float32]) -> None:
    """A float64 gradient beyond float32's range would silently become ±Inf: refused, counted, the first named."""
    over = ~np.isfinite(out) & np.isfinite(np.asarray(a))
    if not over.any():
        return  # Inf/NaN recorded as such are the recording's own values
    w, e = (int(v) for v in np.argwhere(over)[0])
    raise InvalidArgument(
        f"{path}: step {step}: {int(over.sum())} float64 gradient value(s) overflow float32 (largest finite "
        f"{float(np.finfo(np.float32).max):.8g}), first worker {w} element {lo + e} = {float(a[w, e]):.17g}; "
        "a run reads gradients as float32: rescale the recording"
    )


def file_shape(path: str | Path) -> tuple[int, int, int]:
    """(steps, workers, elements) of recorded gradients, read from the headers (checked as a run would; a
    directory's step files counted whatever their gaps: the run's own ``source.gaps`` decides)."""
    f = FileSource(FileSpec(str(path), gaps=True), workers=None)
    return f.max_steps, f.workers, f.elements


#: the one name of a step file (a recording's ``grads/`` and ``real/``, a ``--source`` directory): ``step_`` and the
#: step's number in at least six digits (``step_000017.npy``; step 10^6 is ``step_1000000.npy``)
STEP_FILE = re.compile(r"step_(\d{6,})\.npy")


def step_file(step: int) -> str:
    """The name of step ``step``'s file: ``step_000017.npy``."""
    return f"step_{step:06d}.npy"


def step_numbers(d: Path) -> dict[int, Path]:
    """Step number -> file, of the files of directory ``d`` named :data:`STEP_FILE` (the number written as
    :func:`step_file` writes it). Any other ``.npy`` file (a stray ``a.npy``, a hidden ``.step_1.npy``, an
    unpadded ``step_1.npy``) is refused: it would be read as a step nobody recorded. Other files and
    directories are left alone, never read.

    Raises:
        InvalidArgument: one line naming the file that is no step file.
    """
    out = {}
    for f in sorted(d.iterdir()):
        if f.suffix.lower() != ".npy" or not f.is_file():
            continue
        got = STEP_FILE.fullmatch(f.name)
        if got is None or step_file(int(got.group(1))) != f.name:
            raise InvalidArgument(
                f"{f}: not a step file (a directory of steps holds only step_NNNNNN.npy, e.g. step_000000.npy; "
                "move it away)"
            )
        out[int(got.group(1))] = f
    return out


def step_files(d: Path, *, gaps: bool = False) -> list[Path]:
    """The step files of directory ``d`` in step order (:func:`step_numbers`).

    Without ``gaps`` the numbers are 0, 1, 2, ... with none missing; with it, any increasing numbers.

    Raises:
        InvalidArgument: a file that is no step file, or (without ``gaps``) a missing step: one line naming it.
    """
    found = step_numbers(d)
    numbers = sorted(found)
    if not gaps:
        for i, n in enumerate(numbers):
            if n != i:
                raise InvalidArgument(
                    f"{d}: {step_file(i)} is missing (the next step file is {step_file(n)}): a lost step or a "
                    "numbering gap; set source.gaps = true (--set source.gaps=true) to take the files in number order"
                )
    return [found[n] for n in numbers]


def _npy_header(path: Path, ndim: int) -> tuple[tuple[int, ...], np.dtype[Any], int, bool]:
    """Shape, dtype, data offset and Fortran order from a .npy header, checked (and the file long enough to
    hold them), without reading the data."""
    try:
        with open(path, "rb") as fh:
            fmt = np.lib.format
            version = fmt.read_magic(fh)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, fortran, dtype = read(fh)
            offset = fh.tell()
            have, want = os.fstat(fh.fileno()).st_size - offset, math.prod(shape) * dtype.itemsize
    except _DAMAGED as e:
        raise InvalidArgument(f"{path}: not a readable .npy file ({e})") from None
    _check_array(path, shape, dtype, ndim)
    if have < want:
        raise InvalidArgument(f"{path}: truncated .npy file ({have} bytes of data, its header says {want})")
    return shape, dtype, offset, bool(fortran)


def _check_array(path: Path, shape: tuple[int, ...], dtype: np.dtype[Any], ndim: int) -> None:
    if dtype.hasobject:
        raise InvalidArgument(f"{path}: holds Python objects (pickled); refused: save a float array")
    if dtype.kind != "f" or dtype.itemsize > 8:
        raise InvalidArgument(f"{path}: dtype {dtype} is not float16/float32/float64")
    if len(shape) != ndim:
        want = "(steps, workers, elements)" if ndim == 3 else "(workers, elements)"
        raise InvalidArgument(f"{path}: has {len(shape)} dimensions {shape}, expected {want}")


#: what numpy raises for a damaged .npy/.npz (truncated, not a zip, bad compressed data)
_DAMAGED = (OSError, ValueError, EOFError, zipfile.BadZipFile, zlib.error)


def _load(path: Path | BinaryIO, mmap_mode: Any = None) -> Any:
    try:
        return np.load(path, allow_pickle=False, mmap_mode=mmap_mode)
    except _DAMAGED as e:
        where = getattr(path, "name", path)
        raise InvalidArgument(f"{where}: cannot be read ({type(e).__name__}: {e})") from None


def _load_npz(path: Path) -> NDArray[Any]:
    try:
        fh = open(path, "rb")  # noqa: SIM115 - ours to close: np.load leaves a file it cannot read as a zip open
    except OSError as e:
        raise InvalidArgument(f"{path}: cannot be read ({e.strerror})") from None
    with fh:
        z = _load(fh)  # type: ignore[arg-type]
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise InvalidArgument(f"{path}: not an .npz archive")
        with z:
            if not z.files:
                raise InvalidArgument(f"{path}: empty .npz archive")
            key = "grads" if "grads" in z.files else z.files[0]
            try:
                a = z[key]
            except _DAMAGED as e:
                why = "holds Python objects (pickled); refused" if "Object arrays" in str(e) else f"({e})"
                raise InvalidArgument(f"{path}: array {key!r} cannot be read: {why}") from None
    _check_array(path, a.shape, a.dtype, 3)
    return a


# Peak memory of the runner: bytes per gradient value of one chunk and per input format, per
# element and arm (results and metrics kept across chunks), and fixed (interpreter, numba). Fitted
# to the max RSS of runs of 4 arms, 4..1024 workers, 2^16..2^25 elements, 1 and 3 input formats
# (numba on): the model is within -5%..+9% of each (406 MiB to 1.45 GiB measured). _AHEAD, added
# since (computed, not fitted): the two chunks of float32 gradients the runner draws ahead.
_PER_CELL, _PER_CELL_INPUT, _PER_ELEMENT_ARM, _FIXED, _AHEAD = 6, 14, 10, 192 << 20, 8


def memory_needed(source: Source, *, arms: int, inputs: int, width: int, elements: int | None = None) -> int:
    """About the peak memory (bytes) of a run over ``source``.

    Args:
        source: the opened source (its workers and elements).
        arms: the number of arms.
        inputs: the number of distinct input formats among the arms.
        width: elements per chunk (a model's gradient is one chunk, computed per arm).
    """
    n, m = source.workers, source.elements if elements is None else elements  # (a split run's share)
    model = source.kind == "model"
    cells = n * min(width, m) * (arms if model else 1)
    per = _PER_CELL + _PER_CELL_INPUT * inputs + (0 if model else _AHEAD)
    return cells * per + m * arms * _PER_ELEMENT_ARM + _FIXED


def machine_memory() -> tuple[int | None, int | None]:
    """(available, total) bytes of this machine: /proc/meminfo's MemAvailable and MemTotal,
    else ``os.sysconf`` (total physical memory, and that for available); None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            info = {k: int(v.split()[0]) * 1024 for k, _, v in (line.partition(":") for line in f) if v.strip()}
        return info.get("MemAvailable", info.get("MemFree")), info.get("MemTotal")
    except (OSError, ValueError, IndexError):
        pass
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, AttributeError):
        return None, None
    return total, total


def _size(b: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if b < 1024 or unit == "PiB":
            return f"{b:.1f} {unit}" if unit != "B" else f"{int(b)} B"
        b /= 1024
    raise AssertionError  # unreachable


def check_memory(
    need: int, what: str, lower: str = "source.elements or experiment.workers (or use fewer arms)"
) -> None:
    """Refuse (InvalidArgument) a run needing more memory than this machine has available.

    The message gives the estimate, ``what`` it is for, this machine's available and
    total memory, and the keys to ``lower`` (the command's own). Nothing is refused when the
    machine's memory is unknown.
    """
    avail, total = machine_memory()
    if avail is not None and need > avail:
        raise InvalidArgument(
            f"{what} needs about {_size(need)} of memory; this machine has {_size(avail)} available"
            + (f" ({_size(total)} total)" if total else "")
            + f": lower {lower}"
        )


def open_source(spec: SourceSpec, *, workers: int, seed: int) -> Source:
    """Open the gradient source described by ``spec`` for ``workers`` workers.

    Args:
        spec: a SyntheticSpec, ModelSpec or FileSpec.
        workers: number of workers (>= 1); a file must hold exactly this many.
        seed: experiment seed (>= 0); unused by files.

    Returns:
        A SyntheticSource, ModelSource or FileSource.

    Raises:
        InvalidArgument: bad workers/seed, outlier_worker >= workers, or any file
            problem (one line naming the file).
    """
    for k, v, lo in (("workers", workers, 1), ("seed", seed, 0)):
        if not is_int(v) or v < lo:
            raise InvalidArgument(f"experiment.{k}: must be an integer >= {lo}, got {v!r}")
    if isinstance(spec, SyntheticSpec):
        if spec.outlier_worker >= workers:
            raise InvalidArgument(f"source.outlier_worker: {spec.outlier_worker} is not a worker (workers = {workers})")
        return SyntheticSource(spec, workers=workers, seed=seed)
    if isinstance(spec, ModelSpec):
        return ModelSource(spec, workers=workers, seed=seed)
    if isinstance(spec, FileSpec):
        return FileSource(spec, workers=workers)
    raise InvalidArgument(f"source: expected a SyntheticSpec, ModelSpec or FileSpec, got {type(spec)}")
