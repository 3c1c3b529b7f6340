"""Atomic output files: never half-written, and readable like a plainly written file."""

from __future__ import annotations

import os
import stat

import pytest

from hdp_planner.io.files import write_json_atomic, write_text_atomic


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_new_file_gets_the_umask_mode_not_mkstemps_0600(tmp_path):
    old = os.umask(0o022)
    try:
        write_json_atomic(tmp_path / "plan.json", {"a": 1})
        assert _mode(tmp_path / "plan.json") == 0o644
    finally:
        os.umask(old)


def test_existing_file_keeps_its_mode_and_no_temporary_is_left(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text("old")
    os.chmod(path, 0o640)
    write_text_atomic(path, "new")
    assert path.read_text() == "new" and _mode(path) == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_missing_folder_and_unserialisable_document_write_nothing(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        write_text_atomic(tmp_path / "no" / "plan.json", "x")
    with pytest.raises(ValueError):
        write_json_atomic(tmp_path / "plan.json", {"sigma": float("nan")})
    assert list(tmp_path.iterdir()) == []
