"""A run's output folder and what it writes there: metrics.json and metrics.csv (and the convergence figure)."""

from __future__ import annotations

import contextlib
import csv
import io
import math
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from hdp_planner.io.files import os_message, write_json_atomic, write_text_atomic
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.options import OutputOptions
from hdp_planner_train.run.plots import plot_history

FINISHED = "metrics.json"
"""The file a finished run leaves in its ``--out`` folder."""


def check_finished(output: OutputOptions, *, checkpoint: str | None = None) -> None:
    """Refuse, before anything slow, an ``--out`` folder that holds a finished run (its metrics.json) unless
    ``--overwrite`` replaces it or ``--resume`` continues it, and one that holds an unfinished run (its
    ``checkpoint`` file, no metrics.json) unless ``--resume`` continues it or ``--overwrite`` starts over: a rerun would
    silently replace its results, or the rounds it already ran."""
    if not output.out or output.overwrite:
        return
    folder = Path(output.out)
    if (folder / FINISHED).is_file() and not output.resume:
        raise TrainError(f"{output.out} holds a finished run ({FINISHED}): choose another --out, or replace it with "
                         "--overwrite")  # fmt: skip
    if checkpoint and (folder / checkpoint).is_file() and not (folder / FINISHED).is_file() and not output.resume:
        raise TrainError(f"{folder} holds an unfinished run ({checkpoint}, no {FINISHED}): continue it with --resume, "
                         "or start over with --overwrite")  # fmt: skip


@contextlib.contextmanager
def output_folder(out: str | os.PathLike[str] | None) -> Iterator[Path | None]:
    """The run's ``--out`` folder, created and checked writable before round 1 (a probe file written and removed),
    so that a folder the run cannot write fails before any training and any charge to the ledger. If the run fails
    or is interrupted before it writes anything there, the folders created for it are removed again."""
    if not out:
        yield None
        return
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise TrainError(f"--out {out} is not a directory")
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        _remove_empty(created)
        raise TrainError(os_message(exc, folder)) from None
    try:
        yield folder
    except BaseException:
        _remove_empty(created)
        raise


def _remove_empty(folders: list[Path]) -> None:
    """Remove ``folders`` (deepest first) while they are empty."""
    for path in folders:
        try:
            path.rmdir()
        except OSError:
            return


def json_ready(value: Any) -> Any:
    """``value`` with every NaN or infinity as None (JSON null): a run whose loss diverged is still recorded."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: json_ready(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(v) for v in value]
    return value


def write_metrics(metrics: dict[str, Any], out: Path, plot: bool) -> None:
    """metrics.json (non-finite numbers as null, ``"diverged": true`` when the final loss is not finite), metrics.csv
    (``nan`` where the loss diverged), both readable by their owner only (0600: a run's metrics can name its clients,
    its groups, its audit's canaries and its ledger), and, with ``plot``, the convergence figure."""
    loss = metrics.get("final_loss")
    diverged = {"diverged": True} if isinstance(loss, float) and not math.isfinite(loss) else {}
    write_json_atomic(out / "metrics.json", json_ready({**metrics, **diverged}), private=True)
    table = io.StringIO()
    w = csv.writer(table)
    w.writerow(["round", "accuracy", "loss"])
    for h in metrics["history"]:
        w.writerow([h["round"], f"{h['accuracy']:.4f}", f"{h['loss']:.6f}"])
    write_text_atomic(out / "metrics.csv", table.getvalue(), private=True)
    if plot:
        plot_history(metrics, out / "convergence.png")
