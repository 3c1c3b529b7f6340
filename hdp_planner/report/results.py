"""Result files: what a benchmark or reproduction script measured, with the machine, date and command.

Scripts write one JSON document per result under ``benchmarks/results/``; the documentation renders its tables
from these files (never from numbers typed by hand).
"""

from __future__ import annotations

import datetime as _dt
import os
import platform
import shlex
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from hdp_planner.io.files import write_json_atomic

RESULTS_DIR = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


@dataclass(frozen=True, kw_only=True)
class Table:
    """One table of a result: a caption, column names and rows of cells (numbers are formatted by the writer)."""

    caption: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, kw_only=True)
class Result:
    """A result file's document: a title, the tables, notes, and where and how it was produced."""

    name: str
    title: str
    tables: tuple[Table, ...]
    notes: tuple[str, ...] = ()
    command: str = field(default_factory=lambda: "python " + shlex.join(_script_argv()))
    machine: str = field(default_factory=lambda: machine_description())
    date: str = field(default_factory=lambda: _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"))
    load_average: tuple[float, ...] = field(default_factory=lambda: tuple(round(x, 2) for x in os.getloadavg()))


def _script_argv() -> list[str]:
    """The command line that ran this process, with the script path relative to the working directory."""
    argv = list(sys.argv)
    if argv and os.path.isabs(argv[0]):
        try:
            argv[0] = os.path.relpath(argv[0])
        except ValueError:
            argv[0] = os.path.basename(argv[0])
    return argv


def machine_description() -> str:
    """Processor, core count, OS and Python, plus torch and its device when torch is already imported."""
    parts = [platform.machine(), f"{os.cpu_count()} cores", platform.system(), f"Python {platform.python_version()}"]
    torch = sys.modules.get("torch")
    if torch is not None:
        cuda = torch.cuda.is_available()
        parts.append(f"torch {torch.__version__}" + (f", {torch.cuda.get_device_name(0)}" if cuda else ", CPU"))
    return ", ".join(parts)


def write_result(result: Result, directory: str | os.PathLike[str] = RESULTS_DIR) -> Path:
    """Write ``result`` to ``directory/<name>.json`` atomically.

    Args:
        result: the result.
        directory: the results folder.

    Returns:
        The path written.
    """
    path = Path(directory) / f"{result.name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, asdict(result))
    return path


def read_result(path: str | os.PathLike[str]) -> Result:
    """Read a result file written by :func:`write_result` (ValueError if it is not one)."""
    import json

    try:
        doc: dict[str, Any] = json.loads(Path(path).read_text())
        tables = tuple(
            Table(
                caption=t["caption"],
                columns=tuple(t["columns"]),
                rows=tuple(tuple(str(c) for c in r) for r in t["rows"]),
            )
            for t in doc["tables"]
        )
        return Result(
            name=doc["name"],
            title=doc["title"],
            tables=tables,
            notes=tuple(doc.get("notes", ())),
            command=doc["command"],
            machine=doc["machine"],
            date=doc["date"],
            load_average=tuple(doc.get("load_average", ())),
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path} is not a result file: {exc}") from None


def markdown_table(columns: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table.

    Args:
        columns: the header cells.
        rows: the rows' cells.

    Returns:
        The table's lines, joined.
    """
    lines = ["| " + " | ".join(columns) + " |", "| " + " | ".join("---" for _ in columns) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_result(result: Result, heading_level: int = 2) -> str:
    """A result as Markdown: its title, provenance line, tables and notes.

    Args:
        result: the result.
        heading_level: the level of its title's heading.

    Returns:
        The Markdown text.
    """
    load = ", ".join(f"{x:.2f}" for x in result.load_average)
    out = [
        f"{'#' * heading_level} {result.title}",
        "",
        f"*Produced by `{result.command}` on {result.date}; machine: {result.machine}"
        + (f"; load average {load}" if load else "")
        + ".*",
    ]
    for table in result.tables:
        out += ["", f"**{table.caption}**" if table.caption else "", "", markdown_table(table.columns, table.rows)]
    if result.notes:
        out += [""] + [f"- {note}" for note in result.notes]
    return "\n".join(out) + "\n"
