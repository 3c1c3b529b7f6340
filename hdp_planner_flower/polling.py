"""A ServerApp's grid that asks the SuperLink for replies every fraction of a second.

Flower 1.41's grid of a deployed ServerApp (``HttpGrid.send_and_receive``) pushes a round's messages, then asks for
the replies every 3 s until all have come or the timeout has passed: each message round waits 1.5 s on average after
its last reply, and a SecAgg+ round is four message rounds. :class:`Polling` keeps the grid and its protocol
(``push_messages``, then ``pull_messages`` of the replies still missing) and only asks more often.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from flwr.app import Message


class Polling:
    """``grid`` (anything with Flower's ``Grid`` methods), its ``send_and_receive`` asking for the replies every
    ``every`` seconds; every other attribute is the grid's own."""

    def __init__(self, grid: Any, every: float = 0.2) -> None:
        self.grid, self.every = grid, every

    def __getattr__(self, name: str) -> Any:
        return getattr(self.grid, name)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> list[Message]:
        """Push ``messages``, then pull their replies until all have come or ``timeout`` seconds have passed."""
        missing = set(self.grid.push_messages(messages))
        end = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while missing:
            got = list(self.grid.pull_messages(missing))
            replies += got
            missing -= {msg.metadata.reply_to_message_id for msg in got}
            if not missing or (end is not None and time.monotonic() >= end):
                break
            time.sleep(self.every)
        return replies
