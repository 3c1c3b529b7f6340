"""The deployment's SuperLink is Flower's, its SQLite state waiting a minute for a lock: a write under load waits
instead of dropping a node's reply."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("flwr")

from flwr.supercore import sql_mixin

from hdp_planner_flower.superlink import BUSY_TIMEOUT_MS, patient, wait_for_locks


def test_only_the_busy_timeout_changes():
    flower = tuple(sql_mixin.SQLITE_PRAGMAS)
    mine = patient(flower)
    assert dict(flower)["busy_timeout"] == "5000" and dict(mine)["busy_timeout"] == str(BUSY_TIMEOUT_MS)
    assert [p for p in mine if p[0] != "busy_timeout"] == [p for p in flower if p[0] != "busy_timeout"]


def test_the_superlink_state_waits_for_its_lock(tmp_path, monkeypatch):
    monkeypatch.setattr(sql_mixin, "SQLITE_PRAGMAS", sql_mixin.SQLITE_PRAGMAS)  # restored after the test
    wait_for_locks()

    class State(sql_mixin.SqlMixin):
        pass

    state = State(str(tmp_path / "superlink.db"))
    state.initialize()
    assert state.query("PRAGMA busy_timeout") == [{"timeout": BUSY_TIMEOUT_MS}]


def test_the_command_line_is_flowers():
    res = subprocess.run([sys.executable, "-m", "hdp_planner_flower.superlink", "--help"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0 and "--database" in res.stdout and "--enable-supernode-auth" in res.stdout


def test_a_superlink_in_memory_is_not_restarted(tmp_path):
    from hdp_planner_flower.deploy import DeployError, LocalDeployment

    plan = tmp_path / "plan.json"
    plan.write_text("{}")
    dep = LocalDeployment(tmp_path / "dep", plan=str(plan), nodes=1)
    with pytest.raises(DeployError, match="forgets its registered keys"):
        dep.restart_superlink()
