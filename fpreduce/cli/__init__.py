"""The ``fpreduce`` command: parses arguments, calls the library, prints.

Each group of commands lives in its own module (``_experiment``: run, sweep, plot,
report; ``_numbers``: sum, verify; ``_timing``: scale, price, calibrate; ``_reveal``: reveal) and adds its
parsers with ``add_commands``. Bad input (unknown names, unreadable files, bad values)
prints one line ``fpreduce: error: ...`` and exits with status 2; never a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import warnings

from fpreduce._version import __version__
from fpreduce.base import jit
from fpreduce.base.errors import FpreduceWarning, InvalidArgument
from fpreduce.cli import _experiment, _inspect, _numbers, _progress, _replay, _reveal, _timing

DESCRIPTION = """\
fpreduce: how much does the order of a floating-point sum change your results?

Data-parallel training sums N workers' gradients every step; in bf16, fp16 and
even fp32 the bits depend on the order and tree of that sum. fpreduce emulates
any summation order bit for bit, against an exact oracle, and runs Experiment A
(one fixed order) against Experiment B (the order changes every step).

Start with `fpreduce run` (the default A-vs-B experiment: results, figures and a
PDF report in runs/), then `fpreduce COMMAND --help`."""


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="fpreduce", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--version", action="version", version=__version__)
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    for module in (_experiment, _replay, _inspect, _numbers, _timing, _reveal):
        module.add_commands(sub)
    return ap


def _warn(message: Warning | str, *_: object, **__: object) -> None:
    print(f"fpreduce: warning: {message}", file=sys.stderr)


def _os_error(e: OSError) -> str:
    what = e.strerror or str(e)
    return f"{what}: {e.filename}" if e.filename is not None else what


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    if args.cmd is None:
        args = ap.parse_args(["run", *(argv or [])])
    _progress.silence(bool(getattr(args, "quiet", False)))  # -q: no bar, no progress line
    if getattr(args, "quiet", False):
        jit.quiet()  # (the kernels' first-compile notice, here and in the processes this one starts)
    with warnings.catch_warnings():
        warnings.showwarning = _warn  # one line each, like the errors
        warnings.simplefilter("default", FpreduceWarning)  # shown, whatever filters the caller set
        try:
            return int(args.func(args))
        except InvalidArgument as e:
            print(f"fpreduce: error: {e}", file=sys.stderr)
        except BrokenPipeError:  # stdout closed early (`fpreduce ... | head`): the reader has what it wanted
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 0
        except OSError as e:
            print(f"fpreduce: error: {_os_error(e)}", file=sys.stderr)
        except UnicodeDecodeError as e:
            print(f"fpreduce: error: a file is not UTF-8 text ({e})", file=sys.stderr)
        except MemoryError:
            print("fpreduce: error: out of memory; lower source.elements or experiment.workers", file=sys.stderr)
        except KeyboardInterrupt:
            print("fpreduce: interrupted", file=sys.stderr)
            return 130
    return 2
