"""What a run shows while it runs: the progress bar, its line per round, and a spinner for a long last step."""

from __future__ import annotations

import contextlib

from hdp_planner_train.run.ledger import privacy_ledger


def round_description(plan, spec, *, done: int, rounds: int, acc: float, loss: float) -> str:
    """The progress line: round, accuracy, loss and the ε each group has spent of its budget."""
    line = f"round {done}/{rounds} acc {acc:.2f}% loss {loss:.3f}"
    if not spec.private:
        return line + " (no noise: ε unbounded)"
    spent = privacy_ledger(plan, spec, done)
    return line + " ε spent/budget " + " ".join(f"{e['epsilon_spent']:.3g}/{e['epsilon_budget']:g}" for e in spent)


def progress_bar(enabled: bool, console=None):
    """The rounds' progress: the description (round, accuracy, loss, ε spent) on a line of its own, the bar, the
    rounds done, the time elapsed and the time left below it, so that an 80-column terminal cuts none of them."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    class StackedProgress(Progress):
        def get_renderables(self):
            for task in self.tasks:
                if task.visible:
                    yield Text(task.description, style="bold", overflow="fold")
            yield self.make_tasks_table(self.tasks)

    return StackedProgress(
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TextColumn("ETA"),
        TimeRemainingColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    )


def status(enabled: bool, text: str):
    """A spinner with ``text`` on stderr while a long step after the progress bar runs (nothing when disabled)."""
    if not enabled:
        return contextlib.nullcontext()
    from rich.console import Console

    return Console(stderr=True).status(text)
