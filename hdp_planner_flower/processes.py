"""The processes a local deployment or a simulation starts, found and stopped by PID (from ``/proc``), the free ports
a deployment gives them, and a subreaper that keeps orphaned descendants (a Ray worker whose raylet exited) in reach."""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path


def free_ports(count: int) -> list[int]:
    """``count`` TCP ports free on 127.0.0.1 now (held open together, so they differ)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (children first found, deepest last), from ``/proc``."""
    found, queue = [], [pid]
    while queue:
        parent = queue.pop()
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                kids = Path(f"/proc/{parent}/task/{tid}/children").read_text().split()
            except OSError:
                continue
            for kid in map(int, kids):
                found.append(kid)
                queue.append(kid)
    return found


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def stop_processes(pids: list[int], grace: float = 10.0) -> list[int]:
    """SIGTERM to ``pids``, SIGKILL to those alive after ``grace`` seconds, and those that were this process's
    children reaped (no zombie left for init); returns the PIDs signalled."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 2.0  # SIGKILL is not refused, only not instant
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not a child of ours (or reaped already): its parent reaps it
            pass
    return pids


PR_SET_CHILD_SUBREAPER = 36
"""prctl(2): orphaned descendants are re-parented to this process instead of init."""


def subreaper(on: bool) -> bool:
    """Make this process the subreaper of its descendants (``on``) or not (Linux; False where it cannot): a process
    whose parent exits is then re-parented here, so :func:`descendants` still finds it and it can be stopped."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False
