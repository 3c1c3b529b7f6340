"""``--resume`` trusts nothing in the checkpoint: plain data only, authenticated against the run, rounds only grow,
counted outside the run's folder too (the user's data folder, and the ledger)."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
import os
import pickle
import stat

import pytest

torch = pytest.importorskip("torch")

from hdp_planner_train.simulator import checkpoint  # noqa: E402


class Planted:
    """Unpickling this runs code: what a crafted checkpoint would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def _state(rounds: int) -> dict:
    return {"next_round": rounds, "theta": torch.zeros(3), "history": [{"round": rounds, "accuracy": 1.0}]}


def test_round_trip_and_numpy_arrays_become_tensors(tmp_path):
    import numpy as np

    checkpoint.save(tmp_path, {**_state(2), "audit": {"z": [[np.ones(2)]]}})
    state = checkpoint.load(tmp_path)
    assert state["next_round"] == 2 and torch.equal(state["audit"]["z"][0][0], torch.ones(2, dtype=torch.float64))
    assert oct((tmp_path / checkpoint.KEY).stat().st_mode & 0o777) == "0o600"


def test_a_crafted_pickle_is_refused_without_running_it(tmp_path):
    checkpoint.save(tmp_path, _state(1))
    marker = tmp_path / "pwned"
    (tmp_path / checkpoint.CHECKPOINT).write_bytes(pickle.dumps({"next_round": 0, "x": Planted(str(marker))}))
    with pytest.raises(checkpoint.CheckpointError, match="authentication"):
        checkpoint.load(tmp_path)
    assert not marker.exists()


def test_an_authentic_file_that_is_not_plain_data_is_refused_without_running_it(tmp_path):
    """Even sealed with the run's key, a payload holding an object is not unpickled (weights_only)."""
    checkpoint.save(tmp_path, _state(1))
    key = (tmp_path / checkpoint.KEY).read_bytes()
    marker = tmp_path / "pwned"
    buf = io.BytesIO()
    torch.save({"next_round": 5, "x": Planted(str(marker))}, buf)
    payload = buf.getvalue()
    sealed = checkpoint.MAGIC + hmac.new(key, payload, hashlib.sha256).digest() + payload
    (tmp_path / checkpoint.CHECKPOINT).write_bytes(sealed)
    with pytest.raises(checkpoint.CheckpointError, match="plain data"):
        checkpoint.load(tmp_path)
    assert not marker.exists()


def test_an_edited_round_count_is_refused(tmp_path):
    """The review's edit: next_round rewound to 0 in an otherwise valid checkpoint."""
    checkpoint.save(tmp_path, _state(3))
    path = tmp_path / checkpoint.CHECKPOINT
    data = path.read_bytes()
    state = torch.load(io.BytesIO(data[len(checkpoint.MAGIC) + 32 :]), weights_only=True)
    state["next_round"] = 0
    buf = io.BytesIO()
    torch.save(state, buf)
    path.write_bytes(data[: len(checkpoint.MAGIC) + 32] + buf.getvalue())
    with pytest.raises(checkpoint.CheckpointError, match="authentication"):
        checkpoint.load(tmp_path)


def test_an_older_checkpoint_put_back_is_refused(tmp_path):
    checkpoint.save(tmp_path, _state(3))
    older = (tmp_path / checkpoint.CHECKPOINT).read_bytes()
    checkpoint.save(tmp_path, _state(6))
    (tmp_path / checkpoint.CHECKPOINT).write_bytes(older)
    with pytest.raises(checkpoint.CheckpointError, match="already spent 6"):
        checkpoint.load(tmp_path)


def test_an_older_checkpoint_put_back_with_the_count_removed_is_refused(tmp_path):
    """The review rewound a run by putting an older checkpoint back and deleting ``rounds.spent``."""
    checkpoint.save(tmp_path, _state(3))
    older = (tmp_path / checkpoint.CHECKPOINT).read_bytes()
    checkpoint.save(tmp_path, _state(6))
    (tmp_path / checkpoint.CHECKPOINT).write_bytes(older)
    (tmp_path / checkpoint.SPENT).unlink()
    with pytest.raises(checkpoint.CheckpointError, match="count of rounds spent was removed"):
        checkpoint.load(tmp_path)


def test_another_runs_checkpoint_is_refused(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    checkpoint.save(tmp_path / "a", _state(2))
    checkpoint.save(tmp_path / "b", _state(2))
    (tmp_path / "b" / checkpoint.CHECKPOINT).write_bytes((tmp_path / "a" / checkpoint.CHECKPOINT).read_bytes())
    with pytest.raises(checkpoint.CheckpointError, match="another run"):
        checkpoint.load(tmp_path / "b")


def _rewind(folder, rounds: int) -> None:
    """What whoever can write the run's folder can do: an older state and a matching ``rounds.spent``, both sealed
    with the run's own key (kept in the folder)."""
    key = (folder / checkpoint.KEY).read_bytes()

    def sealed(payload: bytes) -> bytes:
        return checkpoint.MAGIC + hmac.new(key, payload, hashlib.sha256).digest() + payload

    buf = io.BytesIO()
    torch.save(_state(rounds), buf)
    (folder / checkpoint.CHECKPOINT).write_bytes(sealed(buf.getvalue()))
    (folder / checkpoint.SPENT).write_bytes(sealed(json.dumps({"rounds": rounds}).encode()))


def test_a_rewound_checkpoint_resigned_with_the_runs_own_key_is_refused(tmp_path):
    checkpoint.save(tmp_path, _state(6))
    _rewind(tmp_path, 3)
    with pytest.raises(checkpoint.CheckpointError, match="already spent 6"):
        checkpoint.load(tmp_path)


def test_a_run_whose_key_was_replaced_is_refused(tmp_path):
    checkpoint.save(tmp_path, _state(6))
    (tmp_path / checkpoint.KEY).write_bytes(os.urandom(32))
    _rewind(tmp_path, 3)
    with pytest.raises(checkpoint.CheckpointError, match="not the key its rounds were recorded under"):
        checkpoint.load(tmp_path)


def test_a_run_with_no_count_outside_its_folder_is_refused(tmp_path):
    checkpoint.save(tmp_path, _state(6))
    checkpoint.counter_path((tmp_path / checkpoint.KEY).read_bytes()).unlink()
    with pytest.raises(checkpoint.CheckpointError, match="no record of this run's rounds"):
        checkpoint.load(tmp_path)


def test_the_count_outside_the_folder_is_owner_only_and_only_grows(tmp_path):
    checkpoint.save(tmp_path, _state(6))
    checkpoint.save(tmp_path, _state(4))  # a save never lowers it
    path = checkpoint.counter_path((tmp_path / checkpoint.KEY).read_bytes())
    assert path.is_relative_to(os.environ["XDG_DATA_HOME"])  # outside the run's folder
    assert json.loads(path.read_text())["rounds"] == 6
    assert stat.S_IMODE(path.stat().st_mode) == 0o600 and stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_rewound_checkpoint_of_a_ledger_run_is_refused_by_the_ledger(tmp_path):
    """Whoever rewrites the run's folder and the user's data folder: the ledger still knows the rounds it released
    (it holds across machines), and refuses to resume behind them."""
    from hdp_planner import plan
    from hdp_planner.planfile.document import save_plan
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.trainer import TrainConfig, TrainError, run

    path, out, ledger = tmp_path / "plan.json", tmp_path / "run", str(tmp_path / "l.sqlite")
    save_plan(plan((1.0, 2.0, 4.0), 120, rounds=4, q=0.2, clip=1.0), path)

    def cfg(rounds, resume):
        return configure(TrainConfig, dataset="digits", out=str(out), rounds=rounds, resume=resume,
                           progress=False, ledger=ledger, eval_every=10)  # fmt: skip

    run(cfg(2, False), path)
    state = checkpoint.load(out)
    state["next_round"] = 1
    checkpoint.save(out, state)  # sealed with the run's key
    counter = checkpoint.counter_path((out / checkpoint.KEY).read_bytes())
    counter.write_text(json.dumps({"rounds": 1, "folder": str(out.resolve())}))
    with pytest.raises(TrainError, match="released 2 rounds of this run but its checkpoint holds 1"):
        run(cfg(4, True), path)


def test_a_ledger_runs_output_is_owner_only_and_the_head_it_recorded_is_checked_on_resume(tmp_path, monkeypatch):
    """The files of a run that name its clients are 0600; metrics.json records the ledger's head as the run found
    and left it, the checkpoint the head after its last release; resumed on a machine that never wrote the ledger
    (no head file), a ledger whose last events were removed is still refused, by the head the checkpoint recorded."""
    import sqlite3

    from hdp_planner import plan
    from hdp_planner.planfile.document import save_plan
    from hdp_planner_train.run.options import configure
    from hdp_planner_train.simulator.trainer import TrainConfig, TrainError, run

    path, out, ledger = tmp_path / "plan.json", tmp_path / "run", str(tmp_path / "l.sqlite")
    save_plan(plan((1.0, 2.0, 4.0), 120, rounds=4, q=0.2, clip=1.0), path)

    def cfg(rounds, resume):
        return configure(TrainConfig, dataset="digits", out=str(out), rounds=rounds, resume=resume,
                         progress=False, ledger=ledger, eval_every=10)  # fmt: skip

    run(cfg(2, False), path)
    for name in ("checkpoint.pt", "rounds.spent", "run.key", "metrics.json", "metrics.csv"):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o600, name
    chain = json.loads((out / "metrics.json").read_text())["ledger_chain"]
    assert chain["found"]["events"] == 0 and chain["left"]["events"] == 4  # reserve, 2 releases, finish
    assert checkpoint.load(out)["ledger_head"] != chain["left"]["head"]  # the head after round 2's release
    with sqlite3.connect(ledger) as db:
        db.execute("DELETE FROM ledger_events WHERE seq > 2")  # round 2's release and the finish removed
    monkeypatch.setenv("HDP_PLANNER_LEDGER_HEADS", str(tmp_path / "another-machine"))
    with pytest.raises(TrainError, match="does not hold what this run's checkpoint recorded: the pinned head"):
        run(cfg(4, True), path)
