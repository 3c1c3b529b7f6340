"""The run skeleton's hook contract (:mod:`hdp_planner_train.simulator.template`): every family resumes where it
stopped, a callback's state goes into the checkpoint and comes back from it, its metrics are added, and a checkpoint
one of them cannot continue is refused in one line."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from hdp_planner import plan, save_plan  # noqa: E402
from hdp_planner.methods.registry import REGISTRY  # noqa: E402
from hdp_planner_train.api import train_config  # noqa: E402
from hdp_planner_train.rules.aggregate import RoundStats  # noqa: E402
from hdp_planner_train.simulator import template  # noqa: E402
from hdp_planner_train.simulator.checkpoint import load as load_checkpoint  # noqa: E402
from hdp_planner_train.simulator.scaffold import run_metrics  # noqa: E402
from hdp_planner_train.simulator.trainer import FAMILIES, TrainError, run, validate_config  # noqa: E402


@pytest.fixture(scope="module")
def one_group_plan(tmp_path_factory):
    """One ε: the DP-FedAvg row the personal family trains; n = the digits partition's 120 clients."""
    path = tmp_path_factory.mktemp("plan") / "plan.json"
    save_plan(plan([1.0], n=120, rounds=4, q=0.25, clip=1.0), path)
    return path


def _cfg(out, **kw):
    return train_config(**{"dataset": "digits", "out": str(out), "progress": False, "noise": "seeded",
                           "ledger": "none", **kw})  # fmt: skip


def test_every_family_of_the_registry_has_its_hooks():
    assert {m.family for m in REGISTRY.values()} == set(FAMILIES)
    assert all(issubclass(hooks, template.FamilyRun) for hooks in FAMILIES.values())


@pytest.mark.parametrize("method", ["dp-fedavg", "centaur", "dp-fedsam", "dp-fedavg-ft"])
def test_a_resumed_run_equals_the_uninterrupted_one(one_group_plan, tmp_path, method):
    """Two rounds, then a resumed third: the history, θ and every checkpointed entry of the run in one go."""
    steps = {"head_steps": 1} if method in ("centaur", "dp-fedavg-ft") else {}
    kw = dict(method=method, shards=2, eval_every=1, **steps)
    whole = run(_cfg(tmp_path / "whole", rounds=3, **kw), one_group_plan)
    run(_cfg(tmp_path / "part", rounds=2, **kw), one_group_plan)
    resumed = run(_cfg(tmp_path / "part", rounds=3, resume=True, **kw), one_group_plan)
    assert resumed["history"] == whole["history"]
    assert resumed["noise_lambda_measured"] == whole["noise_lambda_measured"]
    a, b = load_checkpoint(tmp_path / "whole"), load_checkpoint(tmp_path / "part")
    assert a.keys() == b.keys()
    for key in a.keys() - {"round_seconds", "torch_rng"}:
        if isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        else:
            assert a[key] == b[key], key


def test_the_selection_family_is_refused_a_resume(tmp_path):
    path = tmp_path / "plan.json"
    save_plan(plan([1.0, 4.0], n=120, rounds=3, q=0.1, clip=1.0), path)
    with pytest.raises(TrainError, match="--resume is not supported for unbiased"):
        run(_cfg(tmp_path / "run", method="unbiased", resume=True), path)


class Counter:
    """A callback that counts the rounds it saw, checkpoints the count and reports it."""

    def __init__(self, refuse: bool = False) -> None:
        self.rounds, self.loaded, self.refuse = 0, None, refuse

    def state(self):
        return {"counted": self.rounds}

    def load_state(self, state):
        if self.refuse:
            raise ValueError("the checkpoint holds another counter's state")
        self.loaded = self.rounds = int(state["counted"])

    def metrics(self, metrics):
        return {"counted": self.rounds, "history_seen": len(metrics["history"])}


class Still(template.FamilyRun):
    """A family whose rounds leave θ where it is, with one :class:`Counter`."""

    def __init__(self, cfg, bound, counter: Counter) -> None:
        super().__init__(cfg, bound)
        self.counter = counter
        self.identity = {"still": True}

    def begin(self, start):
        super().begin(start)
        return (self.counter,)

    def step(self, r, lr):
        def apply_update():
            self.counter.rounds += 1

        return RoundStats(joined=[0], clipped=0, lambda_measured=0.0, lambda_applied=0.0), apply_update

    def metrics(self, log, account):
        return run_metrics(self.cfg, self.bound, d=int(self.theta.numel()), log=log, account=account)


def test_a_callbacks_state_is_checkpointed_restored_and_reported(one_group_plan, tmp_path):
    out = tmp_path / "still"
    first = Counter()
    metrics = template.run_family(Still(*_bound(out, one_group_plan, rounds=2), first))
    assert metrics["counted"] == 2 and metrics["history_seen"] == 2  # added after the family's own metrics
    assert load_checkpoint(out)["counted"] == 2 and load_checkpoint(out)["identity"]["still"] is True
    assert json.loads((out / "metrics.json").read_text())["counted"] == 2
    second = Counter()
    metrics = template.run_family(Still(*_bound(out, one_group_plan, rounds=3, resume=True), second))
    assert second.loaded == 2 and metrics["counted"] == 3 and load_checkpoint(out)["next_round"] == 3


def test_a_checkpoint_a_callback_cannot_continue_is_refused_in_one_line(one_group_plan, tmp_path):
    out = tmp_path / "still"
    template.run_family(Still(*_bound(out, one_group_plan, rounds=1), Counter()))
    with pytest.raises(TrainError, match=r"^.*still: the checkpoint holds another counter's state; rerun with "):
        template.run_family(Still(*_bound(out, one_group_plan, rounds=2, resume=True), Counter(refuse=True)))


def _bound(out, plan_file, **kw):
    out.mkdir(exist_ok=True)  # as trainer.run's output_folder makes it
    cfg = _cfg(out, method="dp-fedavg", **kw)
    return cfg, validate_config(cfg, plan_file)
