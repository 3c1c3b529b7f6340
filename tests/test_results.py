"""Result files: written with their provenance, read back, rendered into the documentation by the MkDocs hook."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hdp_planner.report import results
from hdp_planner.report.results import Result, Table, read_result, render_result, write_result

ROOT = Path(__file__).resolve().parents[1]


def sample() -> Result:
    return Result(
        name="bench_x",
        title="X against Y",
        tables=(Table(caption="seconds", columns=("what", "s"), rows=(("x", "1.0"),)),),
    )


def test_a_result_records_where_and_how_and_reads_back(tmp_path):
    path = write_result(sample(), tmp_path)
    doc = json.loads(path.read_text())
    assert {"command", "machine", "date", "load_average"} <= doc.keys() and "cores" in doc["machine"]
    back = read_result(path)
    assert back.tables == sample().tables and (back.command, back.machine, back.date) == (
        doc["command"],
        doc["machine"],
        doc["date"],
    )
    text = render_result(read_result(path))
    assert text.startswith("## X against Y") and "| x | 1.0 |" in text and doc["command"] in text


def test_a_file_that_is_not_a_result_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": 1}')
    with pytest.raises(ValueError, match="not a result file"):
        read_result(bad)


def load_hook():
    spec = importlib.util.spec_from_file_location("docs_results_hook", ROOT / "docs" / "hooks" / "results.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_hook_renders_matching_files_and_refuses_a_missing_one(tmp_path, monkeypatch):
    hook = load_hook()
    write_result(sample(), tmp_path)
    monkeypatch.setattr(hook, "RESULTS_DIR", tmp_path)
    page = SimpleNamespace(file=SimpleNamespace(src_path="p.md"))
    out = hook.on_page_markdown("intro\n\n<!-- results: bench_* -->\n", page, None, None)
    assert "## X against Y" in out and "<!--" not in out
    with pytest.raises(ValueError, match="no result file"):
        hook.on_page_markdown("<!-- results: nothing -->\n", page, None, None)


def test_every_committed_result_file_reads():
    for path in sorted(results.RESULTS_DIR.glob("*.json")):
        assert read_result(path).name == path.stem
