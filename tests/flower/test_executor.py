"""The warm SuperExec: a forked ClientApp process draws its random state afresh (two children of one parent never
share numpy's or torch's stream), and it stops when the process that started it ends, its children with it."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
torch = pytest.importorskip("torch")

from hdp_planner_flower.executor import reseed  # noqa: E402
from hdp_planner_flower.processes import alive, free_ports  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def child_draws() -> list[tuple[int, float]]:
    """What two forked children of this process draw first from numpy's global generator and torch's, after
    :func:`reseed`."""
    np.random.seed(0)
    torch.manual_seed(0)
    draws = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            reseed()
            os.write(write, f"{np.random.randint(2**31)} {torch.rand(1).item()!r}".encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            a, b = pipe.read().split()
        os.waitpid(pid, 0)
        draws.append((int(a), float(b)))
    return draws


def test_forked_children_draw_their_own_random_state():
    first, second = child_draws()
    assert first[0] != second[0] and first[1] != second[1]
    np.random.seed(0)
    assert np.random.randint(2**31) not in (first[0], second[0])  # not the parent's stream either


def test_the_executor_stops_with_the_process_that_started_it(tmp_path):
    """Started for a node that is not there (it keeps asking), watching a parent that then ends: it exits."""
    parent = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    executor = subprocess.Popen([sys.executable, "-m", "hdp_planner_flower.executor", "--runtime-api-address",
                                 f"127.0.0.1:{free_ports(1)[0]}", "--parent-pid", str(parent.pid), "--interval", "0.2"],
                                env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        assert executor.poll() is None
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 300
        while executor.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert executor.poll() == 0 and not alive(executor.pid)
    finally:
        for proc in (parent, executor):
            if proc.poll() is None:
                proc.kill()
                proc.wait()
