"""``fpreduce replay``: a recorded DDP all-reduce (``fpreduce.torch.Recorder``) emulated bit for bit,
then the A/B analysis of its real gradients into a run directory with a per-parameter table."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from fpreduce.base import jsonfile
from fpreduce.base.texttable import table


def _say(text: str, quiet: bool) -> None:
    if not quiet:
        print(text)


def _step_lines(res: dict[str, Any]) -> list[str]:
    state = "verified against the running library" if res["verified"] else "MODELLED, not verified here"
    wire = "" if res["wire"] == res["dtype"] else f" summed in {res['wire']}"
    lines = [
        f"replay of {res['recording']}: {res['backend']} (torch {res['torch']}), N = {res['world_size']}, "
        f"{res['dtype']}{wire}, average {res['average']}, {res['steps']} steps; plan {res['plan']} ({state})",
        *(
            f"  path {name} ({p['elements']} elements): {p['does']}; emulated as average {p['average']}"
            for name, p in res["paths"].items()
        ),
        table(
            ["step", "elements", "differ", "bit-exact"],
            [[s["step"], s["elements"], s["differ"], "yes" if s["differ"] == 0 else "NO"] for s in res["per_step"]],
            align="rrrl",
            rule=False,
        ),
    ]
    lines.append(
        f"real_match = {res['real_match']:.6g}: {res['elements'] - res['differ']} of {res['elements']} elements "
        "bit-identical to the recorded real all-reduce"
    )
    other = ", ".join(f"{p}: {d}" for p, d in res["contrast"].items())
    lines.append(f"contrast, step 0's differing elements under other plans: {other}")
    return lines


def _layer_lines(rows: list[dict[str, Any]], dtype: str) -> list[str]:
    from fpreduce.report.layers import TABLE_NOTE, layer_table

    header, cells = layer_table(rows, dtype)
    return [TABLE_NOTE + ":", table(header, cells, rule=False)]


def _cmd_replay(args: argparse.Namespace) -> int:
    from fpreduce.backends.replay import VARIANTS, layer_rows, open_recording, replay, run_config
    from fpreduce.report import layers, plots, report
    from fpreduce.run.config import from_dict
    from fpreduce.run.rundir import claim, out_dir, write_replay
    from fpreduce.run.runner import run_experiment

    rec = open_recording(args.recording)
    cfg = from_dict(run_config(rec, args.plan, seed=args.seed))  # checked before anything is computed or written
    res = replay(rec, args.plan)
    quiet = args.json
    for line in _step_lines(res):
        _say(line, quiet)
    out = out_dir(args.out, cfg.experiment.name, "experiment.name")
    most = f", averaged as {cfg.arms[0].average} (the path of most elements)" if "," in res["average"] else ""
    _say(f"A/B analysis of the recorded gradients ({len(cfg.arms)} arms{most}) -> {out}", quiet)
    files: list[Path] = []
    with claim(out, "run", force=args.force):  # one process's run, replay.json and report: two replays never mix
        from fpreduce.cli._progress import Bar

        results = run_experiment(cfg, out, force=args.force, progress=Bar("step", desc="replay analysis"))
        rows = layer_rows(rec, args.plan, seed=args.seed)
        write_replay(out, {**res, "variants": VARIANTS, "rows": rows})
        if not args.no_report:
            files = [p for p in [*plots.plot_run(out), *layers.plot_layers(out)] if p.suffix == ".png"]
            files.append(report.write_report(out))
    if args.json:
        print(jsonfile.dumps({**res, "run": str(out), "variants": VARIANTS, "layers": rows}))
    else:
        from fpreduce.report.tables import summary_table

        print("\n".join(["", *_layer_lines(rows, rec.dtype), ""]))
        print(summary_table(results))
        print("wrote " + ", ".join(str(p) for p in [out / "replay.json", *files]))
    return 0 if res["differ"] == 0 else 1


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """``replay``."""
    r = sub.add_parser(
        "replay",
        help="replay a recorded DDP all-reduce bit for bit, then analyse its gradients",
        description="Replay a recording of fpreduce.torch.Recorder: emulate every step's all-reduce bucket by "
        "bucket (gloo: its ring, verified; nccl: NCCL's ring model, not verified) and count the elements whose "
        "bits differ from the real result; then run the A/B analysis of the recorded gradients into a run "
        "directory, with a per-parameter table of what another order, a relaunch, another world size or a wider "
        "accumulator would change. Exit status 1 when the emulation is not bit-exact.",
    )
    r.add_argument("recording", help="the recording directory (manifest.json, grads/, real/)")
    r.add_argument("--out", default=None, help="run directory (default: runs/replay-<recording name>)")
    r.add_argument("--plan", default=None, help="emulate with this plan instead of the backend's (e.g. tree:nccl:8)")
    r.add_argument("--seed", type=int, default=0, help="seed of the other orders and rank assignments (default 0)")
    r.add_argument(
        "--json", action="store_true", help="print one JSON object (real_match, per step, per layer) and nothing else"
    )
    r.add_argument("--force", action="store_true", help="replace a run already in --out")
    r.add_argument("--no-report", action="store_true", help="skip figures and the PDF report")
    r.add_argument(
        "-q", "--quiet", action="store_true", help="no progress (a bar on a terminal, else a line every ~15 s)"
    )
    r.set_defaults(func=_cmd_replay)
