"""``--resume`` trusts nothing in the checkpoint: plain data only, authenticated against the run, rounds only grow."""

from __future__ import annotations

import hashlib
import hmac
import io
import os
import pickle

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
