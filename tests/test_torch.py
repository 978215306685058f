"""fpreduce.torch's background writer: close() flushes every step, a failed write is one line.

One gloo rank (world size 1, tests/recorder_writer_worker.py) whose step files are slowed down,
so that the writer lags behind the training. The steps' contents are checked against the
parameters' own gradients (world size 1: the bucket is the gradient, the all-reduce keeps it),
and each file's bytes against ``np.save``'s of the same array. Real multi-rank recordings are
tests/test_replay.py's.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from fpreduce.backends.replay import open_recording

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def said(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    pytest.importorskip("torch.distributed")
    d = tmp_path_factory.mktemp("writer")
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(ROOT / "tests" / "recorder_writer_worker.py"), str(d)]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return {"dir": d, **json.loads(p.stdout.splitlines()[-1])}


def test_close_flushes_every_step_bit_for_bit(said: dict[str, Any]) -> None:
    assert said["after_close"] == 3, said
    rec = open_recording(said["dir"] / "flushed")
    assert rec.steps == 3
    for t, grads in enumerate(said["grads"]):
        g = np.load(said["dir"] / "flushed" / "grads" / f"step_{t:06d}.npy")
        real = np.load(said["dir"] / "flushed" / "real" / f"step_{t:06d}.npy")
        layout = rec.layouts[rec.step_layout[t]]
        for bucket in layout:
            for p in bucket["params"]:
                at = bucket["start"] + p["offset"]
                want = np.array(grads[p["name"]], np.int32)
                assert np.array_equal(g[0, at : at + want.size].view(np.int32), want), (t, p["name"])
                assert np.array_equal(real[at : at + want.size].view(np.int32), want), (t, p["name"])
        for a, name in ((g, "grads"), (real, "real")):
            buf = io.BytesIO()
            np.save(buf, a)
            assert (said["dir"] / "flushed" / name / f"step_{t:06d}.npy").read_bytes() == buf.getvalue()


def test_a_failed_write_is_raised_once_in_one_line(said: dict[str, Any]) -> None:
    raised = said["steps_raised"]
    assert raised[-1] is not None, raised
    assert all(r is None for r in raised[:-1]), raised  # the steps before it trained
    where = said["dir"] / "failed"
    assert raised[-1].startswith(f"RecordingError: fpreduce.torch.Recorder: step 0 not written to {where}: ")
    assert "\n" not in raised[-1]
    assert "No such file or directory" in raised[-1]
    assert said["close_raised"] is None  # said once, at the step
    assert not (said["dir"] / "failed" / "real" / "step_000000.npy").exists()
