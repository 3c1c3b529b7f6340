"""A federation in this process: a ``Grid`` whose nodes run a ClientApp directly (no Ray, no network).

For notebooks, tests and benchmarks: node i has ``partition-id`` i and keeps its Context between messages, as a
SuperNode does (SecAgg+ keeps its keys there); each message reaches a node as its own copy, as over a network; a
node that raises answers with an error message, as Flower's runtime makes it do. ``received`` keeps every reply the
server got, and ``drop(i, stage)`` makes node i vanish at a SecAgg+ stage (or, with stage None, at a plain train
message).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

from flwr.app import Context, Error, Message, RecordDict

from hdp_planner_flower.stages import stage_of


@dataclass(frozen=True, kw_only=True)
class LocalRun:
    run_id: int = 1


class InProcessGrid:
    """``nodes`` nodes running ``app``; ``drop(i, stage)`` True makes node i give no reply to that message."""

    def __init__(self, app, nodes: int, drop: Callable[[int, str | None], bool] | None = None, keep: bool = False):
        from flwr.supercore.task_identity import TaskIdentity

        TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 1
        self.app, self.drop, self.keep = app, drop or (lambda i, stage: False), keep
        self.node_ids = [5000 + 11 * i for i in range(nodes)]
        self.contexts = {n: Context(1, n, {"partition-id": i}, RecordDict(), {}) for i, n in enumerate(self.node_ids)}
        self.received: list[Message] = []
        self.run = LocalRun()

    def get_node_ids(self) -> list[int]:
        return list(self.node_ids)

    def send_and_receive(self, messages, *, timeout=None) -> list[Message]:
        replies = []
        for msg in messages:
            node = msg.metadata.dst_node_id
            if self.drop(self.node_ids.index(node), stage_of(msg)):
                continue
            try:
                reply = self.app(copy.deepcopy(msg), self.contexts[node])
            except Exception as exc:
                reply = Message(Error(code=0, reason=f"{type(exc).__name__}: {exc}"), reply_to=msg)
            if self.keep:
                self.received.append(reply)
            replies.append(reply)
        return replies
