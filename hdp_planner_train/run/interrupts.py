"""Interrupts: SIGTERM taken as Ctrl-C (so that a stopped run ends as an interrupted one: its ledger account closed,
its processes and temporary folders gone), and Ctrl-C held over steps that must not be cut apart: a round charged in
the privacy ledger and the checkpoint that records it, or a run's reservation being given back."""

from __future__ import annotations

import signal
import threading

STOPS = (signal.SIGINT, signal.SIGTERM)
"""The signals that stop a run: Ctrl-C, and what ``kill`` and process managers send."""


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def terminate_as_interrupt() -> None:
    """From now on SIGTERM raises KeyboardInterrupt in the main thread, as Ctrl-C does (nothing elsewhere, or where
    SIGTERM is ignored). Libraries that install their own SIGTERM handler (Ray's ``init``) need it again after."""
    if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) is not signal.SIG_IGN:
        signal.signal(signal.SIGTERM, _raise_interrupt)


class HeldInterrupt:
    """Between :meth:`hold` and :meth:`let_go`, SIGINT and SIGTERM are noted instead of raised; :meth:`let_go`
    restores the previous handlers and raises the KeyboardInterrupt it held, if any. Only the main thread receives
    signals: held elsewhere, nothing changes. Also a context manager that restores the handlers on exit (raising
    nothing)."""

    def __init__(self) -> None:
        self._previous: dict[int, object] = {}
        self._pending = False

    def hold(self) -> None:
        """Note SIGINT and SIGTERM from now on (nothing to hold where one is ignored, or off the main thread)."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return
        for sig in STOPS:
            if signal.getsignal(sig) is not signal.SIG_IGN:
                self._previous[sig] = signal.signal(sig, self._note)

    def _note(self, signum, frame) -> None:
        self._pending = True

    def _restore(self) -> None:
        for sig, previous in self._previous.items():  # a handler installed outside Python (None): the default
            signal.signal(sig, signal.SIG_DFL if previous is None else previous)  # type: ignore[arg-type]
        self._previous = {}

    def let_go(self) -> None:
        self._restore()
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def __enter__(self) -> HeldInterrupt:
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()
