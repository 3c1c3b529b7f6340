"""Shared fixtures: paper settings and small plans; hypothesis's profile.

Property tests draw the same examples on every run (``repeatable``, the default), so a run that passed here passes
on CI; ``HYPOTHESIS_PROFILE=explore python -m pytest`` draws new ones each run (and keeps failures in
``.hypothesis/``, to be added as ``@example``). Neither has a deadline: an example's time says nothing of its
correctness, and a loaded machine must not fail a law that holds.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

from hdp_planner import plan
from hdp_planner.planfile.reading import plan_from_dict
from hdp_planner.planfile.schema import PlanFileError

# pytest-xdist's workers inherit a terminal's COLUMNS=80 and LINES=24 that no log has: the commands' output is
# checked as a log or CI prints it (tables whole); tests of the 80-column layout set COLUMNS themselves.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)

settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

#: Level of the goodness-of-fit checks on draws that cannot be seeded (the OS CSPRNG, Flower's key agreement): a
#: correct source fails one such check once in 10^9 runs, so these checks do not fail CI by chance, while the faults
#: they are for stay far below it (an unmasked vector gives p = 0, a normal source 5% too wide p ≈ 1e-28).
UNSEEDED_ALPHA = 1e-9


@pytest.fixture(autouse=True, scope="session")
def _no_default_ledger():
    """Secure runs charge the default privacy ledger, never the user's: none for fixtures shared by several tests…"""
    old = os.environ.get("HDP_PLANNER_LEDGER")
    os.environ["HDP_PLANNER_LEDGER"] = "none"
    yield
    if old is None:
        del os.environ["HDP_PLANNER_LEDGER"]
    else:
        os.environ["HDP_PLANNER_LEDGER"] = old


@pytest.fixture(autouse=True)
def _own_ledger(tmp_path, monkeypatch):
    """… and a fresh one for each test, with a data folder of its own (runs' counts of rounds, nodes' state)."""
    monkeypatch.setenv("HDP_PLANNER_LEDGER", str(tmp_path / "ledger.sqlite"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))


def solve_secure(folder: Path, *, eps: str, n: int, q: float, model_dim: int, extra: tuple[str, ...] = ()) -> Path:
    """``hdp-plan solve`` of a small secure plan into ``folder/plan.json``: GDPFed and GDPFed+, 6 rounds, C = 1,
    b = 16 bits, survivors F = 0.75, and ``extra`` options (the participation cap, hidden participation, …)."""
    from typer.testing import CliRunner

    from hdp_planner_cli.app import app

    path = folder / "plan.json"
    args = ["solve", "--eps", eps, "--n", str(n), "--rounds", "6", "--q", str(q), "--clip", "1.0",
            "--methods", "gdpfed,gdpfed+", "--trust", "secagg", "--bits", "16", "--survivors", "0.75",
            "--model-dim", str(model_dim), *extra, "-o", str(path)]  # fmt: skip
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    return path


def digits_settings(*, clients: int, seed: int, local_steps: int = 1, lr_decay: float = 1.0):
    """What the Flower tests' nodes train with: digits split among ``clients``, batches of 10, lr 0.1, no momentum."""
    from hdp_planner_flower.app import DataSettings

    return DataSettings(dataset="digits", data_dir=None, clients=clients, dirichlet=None, seed=seed,
                        local_steps=local_steps, batch_size=10, momentum=0.0, lr=0.1, lr_decay=lr_decay)  # fmt: skip


def verify_doc(doc):
    """What ``verify`` says of a plan document: the one line reading refuses, or the trust model's problems."""
    try:
        p = plan_from_dict(doc)
    except PlanFileError as exc:
        return [str(exc)]
    return p.trust.problems(p)


def pin_for(path: Path, state: Path, *, method: str = "gdpfed+", sparse_graph: bool = False):
    """A node's pin of the plan file at ``path`` (its SHA-256 read from the file), its state kept in ``state``."""
    from hdp_planner_flower.pin import Pin, file_sha256

    return Pin(plan=str(path), sha256=file_sha256(path), method=method, groups=None, state_dir=str(state),
               sparse_graph=sparse_graph)  # fmt: skip


# name: (epsilons, n, rounds, clip, q, local_steps, Table 1 q_m, Table 5 rows)
PAPER = {
    "FMNIST": dict(
        eps=(0.5, 1.5, 3.0),
        n=6000,
        rounds=50,
        clip=1.5,
        q=0.02,
        local_steps=5,
        table1=(0.69, 1.89, 3.42),
        dpfedavg=(2.26, 5.09),
        gdpfed=((2.26, 0.90, 0.53), 2.77),
        op=((1.42, 0.87, 0.70), 0.57),
        plus=0.49,
    ),
    "SVHN": dict(
        eps=(0.5, 1.5, 3.0),
        n=6000,
        rounds=100,
        clip=1.0,
        q=0.05,
        local_steps=25,
        table1=(1.66, 4.67, 8.68),
        dpfedavg=(13.20, 13.20),
        gdpfed=((13.20, 2.50, 1.16), 5.62),
        op=((2.38, 2.29, 2.23), 0.75),
        plus=0.65,
    ),
    "Shakespeare": dict(
        eps=(0.5, 1.5, 3.0),
        n=714,
        rounds=50,
        clip=1.0,
        q=0.10,
        local_steps=30,
        table1=(4.79, 9.83, 15.21),
        dpfedavg=(17.14, 17.14),
        gdpfed=((17.14, 3.26, 1.41), 7.27),
        op=((4.45, 3.18, 2.46), 0.93),
        plus=0.79,
    ),
    "CIFAR-10": dict(
        eps=(2.0, 6.0, 12.0),
        n=600,
        rounds=100,
        clip=1.5,
        q=0.10,
        local_steps=5,
        table1=(3.61, 9.62, 16.77),
        dpfedavg=(3.52, 7.91),
        gdpfed=((3.52, 0.95, 0.49), 3.72),
        op=((0.98, 0.91, 0.83), 0.64),
        plus=0.56,
    ),
}


def paper_plan(name: str, fixed: bool, **extra):
    s = PAPER[name]
    fixed_q = tuple(x / 100 for x in s["table1"]) if fixed else None
    return plan(
        s["eps"],
        s["n"],
        rounds=s["rounds"],
        q=s["q"],
        clip=s["clip"],
        local_steps=s["local_steps"],
        sparsity=(0.7, 0.8, 0.9),
        fixed_q=fixed_q,
        **{"min_share": 0.0, **extra},  # the paper's Problem 1 has no share rule
    )


@pytest.fixture(scope="session")
def fmnist_plan():
    return plan((0.5, 1.5, 3.0), 6000)
