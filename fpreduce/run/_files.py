"""The file-level safety of run and sweep directories, used by :mod:`fpreduce.run.rundir`.

* :func:`atomic_write`: a temporary file in the same directory, fsync'd and renamed over
  the target, so a reader or a crash (``kill -9``, a full disk) sees the old file or
  the new one, never half of one; an OSError names the file it was writing.
* :class:`DirLock`: an advisory ``flock`` on ``DIR/.fpreduce.lock`` (an empty hidden
  file, kept). A run holds it exclusively for its lifetime, so a second run into the
  same directory stops with a one-line error instead of mixing its files with the
  first's; ``plot`` and ``report`` hold it shared while they read a run and write into
  it. The kernel releases it when its process dies, so a killed run never leaves a
  stale lock behind (``--resume`` works at once). A process takes it once: inside a
  command that holds it, every writer's own ``DirLock`` of that directory is a no-op
  (:func:`held`), so a command can hold it across all of its writes.
* :func:`remove_leftovers`: the temporary files a killed writer left; :func:`entries`
  and :func:`check_only`: what a directory holds, and a refusal if it is not ours.
* :func:`read_csv`: the one CSV parser; :func:`check_report_target`: a report never
  overwrites a file that is not an earlier report.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import os
import tempfile
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

from fpreduce.base.errors import InvalidArgument

try:
    import fcntl
except ImportError:  # not POSIX (Windows): directories are used unlocked
    fcntl = None  # type: ignore[assignment]

__all__ = [
    "FIGURES_DIR",
    "LOCK_FILE",
    "REPORT_PDF",
    "DirLock",
    "atomic_write",
    "check_free",
    "check_only",
    "check_report_target",
    "clear_figures",
    "entries",
    "file_target",
    "held",
    "is_report",
    "named",
    "read_csv",
    "remove_if_empty",
    "remove_leftovers",
    "require",
]

#: the lock file of a run or sweep directory
LOCK_FILE = ".fpreduce.lock"
REPORT_PDF, FIGURES_DIR = "report.pdf", "figures"
T = TypeVar("T")
_TMP_SUFFIX = ".tmp"
# errors that mean "this file system cannot lock": then the directory is used unlocked
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL)
#: the directories whose lock this process holds (their real paths), and how many DirLocks hold each
_HELD: dict[str, int] = {}


def named(e: OSError, path: Path) -> OSError:
    """``e`` with ``path`` as its file name when it has none (``No space left on device: None``)."""
    if e.filename is not None:
        return e
    return OSError(e.errno, e.strerror or str(e), str(path))


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename (mode 0644).

    Raises:
        OSError: naming ``path`` (disk full, no permission, ...); the target is
            unchanged and the temporary file removed.
    """
    raw = data.encode() if isinstance(data, str) else data
    try:
        make_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=_TMP_SUFFIX)
    except OSError as e:
        raise named(e, path) from None
    try:
        _write(fd, raw)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as e:
        Path(tmp).unlink(missing_ok=True)
        raise named(e, path) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def make_dirs(d: Path) -> bool:
    """Create directory ``d`` and its missing parents; whether it was created.

    Raises:
        OSError: as :meth:`Path.mkdir` (naming ``d``), and for a path too deep to create
            (``--out`` thousands of directories deep: Python's recursion limit).
    """
    if d.is_dir():
        return False
    try:
        d.mkdir(parents=True, exist_ok=True)
    except RecursionError:
        raise OSError(errno.ENAMETOOLONG, "too many missing parent directories to create", str(d)) from None
    return True


def _write(fd: int, raw: bytes) -> None:
    """Write ``raw`` to the open file ``fd``, flush it to the disk and close it (the tests' fault injection point)."""
    with os.fdopen(fd, "wb") as f:
        f.write(raw)
        f.flush()
        os.fsync(f.fileno())


def remove_leftovers(d: Path, names: Iterable[str]) -> None:
    """Delete the temporary files (``.NAME.*.tmp``) that a killed :func:`atomic_write` of ``names`` left in ``d``."""
    for name in names:
        for p in d.glob(f".{name}.*{_TMP_SUFFIX}"):
            p.unlink(missing_ok=True)


def remove_if_empty(d: Path) -> None:
    """Remove directory ``d`` (and its lock file) if nothing else is left in it."""
    if d.is_dir() and not entries(d):
        for p in [*d.glob(f".*{_TMP_SUFFIX}"), d / LOCK_FILE]:
            p.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            d.rmdir()


#: what file managers and notebooks leave in any folder they show: not a sign of foreign content
_OS_FILES = (".DS_Store", "Thumbs.db", "desktop.ini", ".ipynb_checkpoints")


def entries(d: Path) -> list[str]:
    """The names in directory ``d`` (none if missing) but the lock, the temporaries of killed
    writers and what file managers leave (``.DS_Store``, ``Thumbs.db``, ...).

    Raises:
        InvalidArgument: ``d`` exists and is not a directory.
    """
    if d.exists() and not d.is_dir():
        raise InvalidArgument(f"{d} exists and is not a directory; choose another --out")
    if not d.is_dir():
        return []
    return [
        p.name
        for p in d.iterdir()
        if p.name != LOCK_FILE and p.name not in _OS_FILES and not (p.name[0] == "." and p.suffix == _TMP_SUFFIX)
    ]


def check_only(
    d: Path, names: Sequence[str], allowed: Sequence[str], what: str, hint: str = "choose another --out"
) -> None:
    """Refuse (InvalidArgument) a directory holding names outside ``allowed``: it is not a fpreduce ``what``."""
    if foreign := sorted(n for n in names if n not in allowed):
        more = ", ..." if len(foreign) > 3 else ""
        raise InvalidArgument(
            f"{d} is not empty and not a fpreduce {what} directory (it holds {', '.join(foreign[:3])}{more}); {hint}"
        )


def clear_figures(d: Path) -> None:
    """Delete ``d/figures/*.png|pdf|svg`` (and the folder if that empties it)."""
    fig = d / FIGURES_DIR
    if fig.is_dir():
        for p in fig.iterdir():
            if p.suffix in (".png", ".pdf", ".svg") and p.is_file():
                p.unlink()
        if not any(fig.iterdir()):
            fig.rmdir()


def is_report(path: Path) -> bool:
    """Whether ``path`` is a PDF written by fpreduce (its Creator says so): one a new report may replace."""
    try:
        with open(path, "rb") as f:
            data = f.read(64 << 20)
    except OSError:
        return False
    return data.startswith(b"%PDF-") and b"/Creator (fpreduce " in data


def held(d: Path) -> bool:
    """Whether this process holds ``d``'s lock (a :class:`DirLock` of it is open)."""
    return os.path.realpath(d) in _HELD


def file_target(path: str | Path, what: str, option: str, ours: Callable[[Path], bool], example: str) -> Path:
    """``path`` as a Path, if a command may write its one ``what`` file there (``report -o``, ``calibrate -o``).

    Its directory must exist (a file output never creates directories) and the file be new
    or an earlier fpreduce ``what`` (``ours(path)``), which it replaces.

    Raises:
        InvalidArgument: ``path`` is a directory, in a missing directory, or a file that is not ours.
    """
    p = Path(path)
    if p.is_dir():
        raise InvalidArgument(f"{p} is a directory; give the {what} a file name, e.g. {p / example}")
    if not p.parent.is_dir():
        raise InvalidArgument(f"{p.parent} is not a directory: create it first, or choose another {option}")
    if p.exists() and not ours(p):
        raise InvalidArgument(f"{p} exists and is not a fpreduce {what}; not overwriting it (choose another {option})")
    return p


def check_report_target(path: str | Path) -> Path:
    """``path`` as a Path, if a report may be written there: a new file or an earlier fpreduce report
    in an existing directory (:func:`file_target`)."""
    return file_target(path, "report", "-o", is_report, REPORT_PDF)


def require(path: Path, what: str) -> None:
    """InvalidArgument unless ``path`` is a file (one of a fpreduce ``what`` directory's)."""
    if not path.is_file():
        raise InvalidArgument(
            f"{path} not found: is {path.parent} a fpreduce {what} directory? ({path.name} is missing)"
        )


def read_csv(
    path: Path, what: str, required: Sequence[str], parse: Callable[[dict[str, str]], T]
) -> tuple[list[str], list[T]]:
    """Header and parsed rows of a CSV; a truncated last row (interrupted writer) is dropped.

    Raises:
        InvalidArgument: missing or unreadable file (not UTF-8 included), a missing
            column, or a malformed row before the last (names the file and line).
    """
    require(path, what)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidArgument(f"{path}: cannot read ({e})") from None
    lines = text.splitlines()
    if len(lines) > 1 and not text.endswith("\n"):
        lines = lines[:-1]  # the writer stopped mid-row
    records = list(csv.reader(lines))
    header, out = (records[0] if records else []), []
    if missing := [c for c in required if c not in header]:
        raise InvalidArgument(f"{path}: not a fpreduce {path.name} (missing column(s) {', '.join(missing)})")
    for i, rec in enumerate(records[1:], start=2):
        try:
            if len(rec) != len(header):
                raise ValueError(f"{len(rec)} fields, expected {len(header)}")
            out.append(parse(dict(zip(header, rec, strict=True))))
        except ValueError as e:
            if i == len(records):
                break  # truncated last row
            raise InvalidArgument(f"{path}, line {i}: malformed row ({e})") from None
    return header, out


class DirLock:
    """``with DirLock(d):`` holds an advisory lock on directory ``d`` (created if missing).

    Exclusive by default (a run); ``shared=True`` for readers that write beside the
    run's files (figures, report). Never waits: a lock held by another process is an
    InvalidArgument saying so. A shared lock on a directory where the lock file cannot
    be created (read-only) is skipped: nobody can be writing there either. Inside a
    DirLock of the same directory in this process (either kind) it is a no-op: the
    outer one holds the directory.
    """

    def __init__(self, d: Path, *, shared: bool = False) -> None:
        self.dir, self.shared = Path(d), shared
        self._fd: int | None = None
        self._key: str | None = None
        self.created = False  #: the directory did not exist before (so a failed start may remove it)

    def __enter__(self) -> DirLock:
        d, key = self.dir, os.path.realpath(self.dir)
        if key in _HELD:  # this process holds it already
            _HELD[key] += 1
            self._key = key
            return self
        if self.shared and not d.is_dir():
            return self  # nothing to read: the reader's own error says so
        try:
            if d.exists() and not d.is_dir():
                raise OSError(errno.ENOTDIR, "exists and is not a directory")
            self.created = make_dirs(d)
            fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            if self.shared and e.errno in (errno.EACCES, errno.EROFS, errno.EPERM):
                return self
            raise InvalidArgument(f"cannot write to {d}: {e.strerror}") from None
        try:
            if fcntl is not None:
                fcntl.flock(fd, (fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            who = "a run" if self.shared else "a run, `plot` or `report`"
            raise InvalidArgument(
                f"{d} is in use by another fpreduce process ({who}{_holder(d)}); wait for it to finish"
                + ("" if self.shared else " or choose another --out")
            ) from None
        except OSError as e:
            if e.errno not in _NO_LOCKS:
                os.close(fd)
                raise InvalidArgument(f"cannot lock {d / LOCK_FILE}: {e.strerror}") from None
        if not self.shared:  # who holds it, for the message of the next one
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd, self._key = fd, key
        _HELD[key] = 1
        return self

    def __exit__(self, typ: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None) -> None:
        if self._key is not None:
            _HELD[self._key] -= 1
            if not _HELD[self._key]:
                del _HELD[self._key]
            self._key = None
        if self._fd is None:
            return
        if typ is not None and self.created and [p.name for p in self.dir.iterdir()] == [LOCK_FILE]:
            (self.dir / LOCK_FILE).unlink(missing_ok=True)  # a start that failed leaves no trace
            self.dir.rmdir()
        os.close(self._fd)  # releases the lock
        self._fd = None


def check_free(d: Path) -> None:
    """InvalidArgument if a run in another process holds ``d``'s lock (it is writing ``d``); reads only.

    Lets a run about to start say "in use" rather than judge a directory another run is changing.
    """
    path = d / LOCK_FILE
    if fcntl is None or not path.is_file() or held(d):
        return
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        raise InvalidArgument(
            f"{d} is in use by another fpreduce process (a run{_holder(d)}); wait for it to finish "
            "or choose another --out"
        ) from None
    except OSError:
        pass
    finally:
        os.close(fd)


def _holder(d: Path) -> str:
    """``, pid N`` of the last exclusive holder of ``d``'s lock, if recorded and still alive."""
    try:
        pid = int((d / LOCK_FILE).read_text().strip())
        os.kill(pid, 0)
    except PermissionError:
        pass  # alive, another user's
    except (OSError, ValueError):
        return ""
    return f", pid {pid}"
