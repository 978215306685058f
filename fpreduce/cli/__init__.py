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


#: every command's --help: a description (where its module gives none) and examples
HELP: dict[str, tuple[str, list[str]]] = {
    "run": ("", ["fpreduce run --steps 20", "fpreduce run examples/train-bf16.toml --set experiment.workers=32"]),
    "replay": ("", ["fpreduce replay recording/ --out runs/replay"]),
    "plot": (
        "Redraw the figures of a run or a sweep from its files (metrics.csv, sweep.csv); nothing is recomputed.",
        ["fpreduce plot runs/default"],
    ),
    "sweep": (
        "Run the A-vs-B experiment at every point of a grid (workers x plans x formats x source "
        "distributions) from a config with a [sweep] table; sweep.csv, one run directory per point, a figure "
        "and a report. --set overrides keys as in `run` (sweep.KEY for the grid); --resume goes on.",
        [
            "fpreduce sweep examples/sweep-ring.toml --jobs 2",
            "fpreduce sweep examples/sweep-ring.toml --set sweep.workers=[2,4]",
        ],
    ),
    "report": ("Write the PDF report of a run or a sweep from its files.", ["fpreduce report runs/default -o a.pdf"]),
    "show": (
        "Print a run's summary table from its summary.json (complete or interrupted); computes nothing.",
        ["fpreduce show runs/default", "fpreduce show runs/default --json"],
    ),
    "compare": (
        "Say, arm by arm, whether two runs' results are bit-identical (metrics.csv's per-step digests), the first "
        "step where they differ and how the configs differ. Exit status 0 identical, 1 different.",
        ["fpreduce compare runs/a runs/b"],
    ),
    "list": (
        "The formats (with every accepted spelling) or the plan families, with their syntax.",
        ["fpreduce list formats", "fpreduce list plans --json"],
    ),
    "sum": (
        "Sum N values along each plan in the chosen formats and rounding, against the exact sum: the value, its "
        "hex, its error in ulps and the a-priori bound; --orders K samples random orders and counts the results.",
        [
            "fpreduce sum 1e8,1,-1e8 --plans sequential,pairwise",
            "fpreduce sum 1,2,3,4 --plans '((0,1),(2,3))',ring --input bf16",
        ],
    ),
    "verify": (
        "Run one real all-reduce (Open MPI under mpirun, or gloo through torch.distributed) on seeded inputs and "
        "compare its bits with the plan fpreduce emulates for it (Open MPI with no --algorithm: its own choice, "
        "plan ompi:default). Exit status 0 bit-identical, 1 not.",
        ["fpreduce verify --backend mpi --np 4", "fpreduce verify --backend mpi --np 4 --algorithm ring"],
    ),
    "scale": (
        "Speed-up curves of data-parallel training on a modelled cluster: compute split over N workers plus the "
        "all-reduce of each plan; per point the time, speed-up, efficiency, and nccl-tests' algbw and busbw. "
        "--bytes takes several message sizes, as nccl-tests does. Writes scale.json, a figure and report.pdf.",
        ["fpreduce scale examples/scaling.toml", "fpreduce scale --bytes 1M,16M,256M --print-only"],
    ),
    "price": (
        "The price of determinism: train the same model in several modes (barrier with a fixed order, arrival "
        "order, asynchronous, Local-SGD, ...) on one simulated clock; time to target loss and bits changed.",
        ["fpreduce price examples/price.toml", "fpreduce price examples/price.toml --no-report -q"],
    ),
    "calibrate": (
        "Time Open MPI's allreduce algorithms over message sizes and fit the cost model's alpha, beta and gamma; "
        "the [cluster] profile that scale and price read.",
        ["fpreduce calibrate --np 4 -o cluster.toml"],
    ),
    "reveal": (
        "Find the summation tree a black box uses (numpy.sum, numpy.dot, torch.sum, a matmul, your "
        "MODULE:FUNCTION, or a real all-reduce: gloo, mpi:ALGORITHM on --np local ranks) by masked probes, and "
        "verify it bit for bit as a plan. Exit status 0 a tree, 1 none.",
        [
            "fpreduce reveal numpy.sum --n 64",
            "fpreduce reveal torch.sum --n 32 --format bf16",
            "fpreduce reveal gloo --np 4 --n 256",
            "fpreduce reveal mpi:ring --np 4 --report reveal.pdf",
        ],
    ),
}


def _describe(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Give every command's --help its description and examples (HELP)."""
    for name, p in sub.choices.items():
        text, examples = HELP.get(name, ("", []))
        p.description = p.description or text
        p.epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
        p.formatter_class = _Formatter


class _Formatter(argparse.HelpFormatter):
    """Wrapped descriptions, examples kept line by line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return text
        return super()._fill_text(text, width, indent)


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="fpreduce", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--version", action="version", version=__version__)
    sub = ap.add_subparsers(dest="cmd", metavar="COMMAND")
    for module in (_experiment, _replay, _inspect, _numbers, _timing, _reveal):
        module.add_commands(sub)
    for name in THREADED:
        sub.choices[name].add_argument(
            "--threads",
            type=_positive,
            metavar="T",
            help="threads of the compiled kernels (default: every core, or $FPREDUCE_THREADS); the same bits for any T",
        )
    _describe(sub)
    return ap


#: the commands whose sums run on the compiled kernels' threads (--threads)
THREADED = ("run", "sweep", "replay", "sum")


def _positive(text: str) -> int:
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"need an integer >= 1, got {text!r}")
    return int(text)


#: what to lower when a command runs out of memory: its own keys
_LOWER = {
    "run": "source.elements or experiment.workers",
    "sweep": "source.elements or experiment.workers",
    "scale": "scale.workers or scale.bytes",
    "price": "price.workers or the model's size ([source])",
}


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
    if getattr(args, "threads", None) is not None:
        os.environ["FPREDUCE_THREADS"] = str(args.threads)  # every reduction here and in the processes it starts
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
            print(f"fpreduce: error: out of memory; lower {_LOWER.get(args.cmd, _LOWER['run'])}", file=sys.stderr)
        except KeyboardInterrupt:
            print("fpreduce: interrupted", file=sys.stderr)
            return 130
    return 2
