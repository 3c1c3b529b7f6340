"""Ctrl-C held over steps that must not be cut apart: a round charged in the privacy ledger and the checkpoint that
records it, or a run's reservation being given back."""

from __future__ import annotations

import signal
import threading


class HeldInterrupt:
    """Between :meth:`hold` and :meth:`let_go`, SIGINT is noted instead of raised; :meth:`let_go` restores the
    previous handler and raises the KeyboardInterrupt it held, if any. Only the main thread receives signals: held
    elsewhere, nothing changes. Also a context manager that restores the handler on exit (raising nothing)."""

    def __init__(self) -> None:
        self._held = False
        self._previous = None
        self._pending = False

    def hold(self) -> None:
        """Note SIGINT from now on (nothing to hold where it is ignored, or off the main thread)."""
        if self._held or threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
            return
        self._previous = signal.signal(signal.SIGINT, self._note)
        self._held = True

    def _note(self, signum, frame) -> None:
        self._pending = True

    def _restore(self) -> None:
        if self._held:  # a handler installed outside Python (None) is given back as the default
            signal.signal(signal.SIGINT, signal.SIG_DFL if self._previous is None else self._previous)
            self._held = False

    def let_go(self) -> None:
        self._restore()
        if self._pending:
            self._pending = False
            raise KeyboardInterrupt

    def __enter__(self) -> HeldInterrupt:
        return self

    def __exit__(self, *exc: object) -> None:
        self._restore()
