"""A warm SuperExec for the SuperNodes of this machine: every ClientApp process forked from one that has already
imported the node's ClientApp.

Flower 1.41's SuperNode (``--isolation subprocess``, its default) starts a SuperExec of its own, which starts a new
Python process (``flwr-clientapp``) for every message: each pays the interpreter's start and every import of its
stage (Flower, torch, the planner), seconds of CPU on a small machine, four times a round under SecAgg+. With
``flower-supernode --isolation process`` the SuperNode starts none and serves its Runtime API to a SuperExec that runs
elsewhere. :func:`serve` is that SuperExec, for any number of SuperNodes: one process that imports, once, what
``flwr-clientapp`` imports and every stage of ``hdp_planner_flower.node:client`` needs (torch included), then polls each
node's Runtime API for a ClientApp task (``AcquireTask``, as Flower's SuperExec does) and, for each task, forks a
child that runs Flower's own ``run_clientapp`` with the task's token: the child pulls the message and the node's
context, loads the ClientApp, answers, pushes the reply and the context back, and exits, as ``flwr-clientapp`` does.

What the child shares with its parent is what was imported: the parent never holds a message, a context or a key; it
holds each task's token only to hand it to the child (as Flower's SuperExec does). Each message still has a process of
its own, so a node's SecAgg+ keys and state live only in its context, as with Flower's default. The random state that
fork would copy is drawn afresh in every child: Python's ``random`` reseeds itself, numpy's global generator and
torch's default one are reseeded from the OS's entropy. The parent stops when the process that started it ends
(``--parent-pid``); its children stop with it (each watches its parent, as ``flwr-clientapp`` does).

Usage (``hdp-plan deploy local --warm`` starts it for its nodes)::

    python -m hdp_planner_flower.executor --runtime-api-address 127.0.0.1:PORT [...] [--parent-pid PID]
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Sequence

from hdp_planner_flower.processes import alive

WARM = (
    "flwr.supernode.runtime.run_clientapp",  # what `flwr-clientapp` imports
    "flwr.server.workflow.secure_aggregation.secaggplus_workflow",  # the masks' other user (see .masks)
    "hdp_planner_flower.node",  # the stages that do not train
    "hdp_planner_flower.app",  # the training stage: torch, the model, the data, the pinned plan's checks
    "hdp_planner_flower.secagg_mod",
    "hdp_planner_flower.node_state",
    "hdp_planner_train.rules.clipping",
    "hdp_planner_flower.membership",  # a node's first round: it derives what it keeps of the pinned plan
    "hdp_planner.planfile.document",
    "hdp_planner.ledger.composition",
    "hdp_planner.ledger.runs",
    "hdp_planner.trust.registry",
    "hdp_planner_train.rules.specs",
    "hdp_planner_train.run.ledger",
)
"""What the parent imports before it forks: every stage of the node's ClientApp, and the planner its first round
derives the pinned plan with (a later round reads the derivation back without it)."""


def warm(modules: Sequence[str] = WARM) -> None:
    """Import ``modules`` (those not installed are skipped), then move everything allocated so far out of the garbage
    collector's reach, so that the children do not copy the pages it would touch."""
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError:
            pass
    gc.freeze()


def reseed() -> None:
    """Draw the random state a fork copies afresh from the OS's entropy (numpy's global generator, torch's default
    one); Python's ``random`` reseeds itself in a forked child."""
    import numpy as np

    np.random.seed(int.from_bytes(os.urandom(4), "little"))
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)


def run_task(address: str, token: str, parent: int) -> None:
    """In a forked child: Flower's ``run_clientapp`` for the task of ``token`` at the node's Runtime API
    ``address``, then exit with its exit code (never returns)."""
    code = 1
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        reseed()
        from flwr.supernode.runtime.run_clientapp import run_clientapp

        run_clientapp(runtime_api_address=address, token=token, insecure=True, certificates=None, parent_pid=parent,
                      runtime_dependency_install=False)  # fmt: skip
        code = 0
    except SystemExit as exc:  # flwr_exit ends every task with sys.exit
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(addresses: Sequence[str], *, parent_pid: int | None = None, interval: float = 1.0) -> None:
    """Poll each SuperNode's Runtime API at ``addresses`` every ``interval`` seconds for a ClientApp task and fork a
    child for each (:func:`run_task`); until SIGTERM or SIGINT, or until process ``parent_pid`` ends. On leaving,
    the children still running get SIGTERM."""
    from flwr.proto.runtime_pb2 import AcquireTaskRequest
    from flwr.supercore.constant import TaskType
    from flwr.supercore.interceptors import RuntimeVersionHttpInterceptor
    from flwr.supercore.runtime import RuntimeHttpClient

    warm()
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, frame: stop.append(signum))
    clients = {address: RuntimeHttpClient.from_server_address(
        server_address=address, insecure=True, root_certificates=None,
        interceptors=[RuntimeVersionHttpInterceptor(component_name="SuperExec")],
    ) for address in addresses}  # fmt: skip
    request = AcquireTaskRequest(supported_task_types=[TaskType.CLIENT_APP])
    children: set[int] = set()
    try:
        while not stop and (parent_pid is None or alive(parent_pid)):
            children -= reaped(children)
            for address, client in clients.items():
                try:
                    res = client.AcquireTask(request)
                except Exception:  # the node is not up yet, or restarting: ask again next time
                    continue
                if res.HasField("task") and res.token:
                    pid = os.fork()
                    if pid == 0:
                        run_task(address, res.token, os.getppid())
                    children.add(pid)
            time.sleep(interval)
    finally:
        for pid in children:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for client in clients.values():
            client.close()


def reaped(children: set[int]) -> set[int]:
    """The children that have ended (and are reaped now)."""
    done = set()
    for pid in children:
        try:
            if os.waitpid(pid, os.WNOHANG)[0] == pid:
                done.add(pid)
        except ChildProcessError:
            done.add(pid)
    return done


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m hdp_planner_flower.executor", description=__doc__.splitlines()[0])
    ap.add_argument("--runtime-api-address", nargs="+", required=True, help="each SuperNode's Runtime API (HOST:PORT)")
    ap.add_argument("--parent-pid", type=int, default=None, help="stop when this process ends")
    ap.add_argument("--interval", type=float, default=float(os.environ.get("FLWR_SUPEREXEC_TASK_POLL_INTERVAL", 1.0)),
                    help="seconds between two polls of every node (Flower's SuperExec: 1)")  # fmt: skip
    args = ap.parse_args(argv)
    serve(args.runtime_api_address, parent_pid=args.parent_pid, interval=args.interval)


if __name__ == "__main__":
    main()
