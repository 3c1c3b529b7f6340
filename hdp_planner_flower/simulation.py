"""``hdp-plan flower``: a plan's method trained through Flower's simulation engine (Ray), one virtual node per client.

Validation is the trainer's (:func:`hdp_planner_train.trainer._check`: plan verified, data partition of the plan's
n, method in the plan); metrics are the trainer's (``base_metrics``, ``metrics.json``/``.csv``) plus
``"runtime": "flower"``, the flwr version and the trust model.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hdp_planner_flower import offline_env, require_flwr

FLOWER_METHODS = ("dp-fedavg", "gdpfed", "gdpfed-op", "gdpfed+", "pfa", "idp-fedavg-sample", "idp-fedavg-scale",
                  "time-adaptive")  # fmt: skip
"""The plan's client-level methods (rows of ``plan.json``) that run on Flower."""

TRUST_NOTES = {
    "server": "trusted server: clients send clipped updates, the server adds each group's full noise N(0, C²σ²)",
    "secagg": (
        "clients add noise shares N(0, C²σ²/c) and the server adds the shares of sampled clients that did not reply; "
        "Flower 1.41's SecAgg+ runs only with its legacy API, so updates are NOT masked: the server sees each noisy "
        "individual update (each carries only 1/c of the group's noise)"
    ),
}


@dataclass(frozen=True)
class FlowerConfig:
    plan: str
    method: str = "gdpfed+"
    dataset: str = "digits"
    data_dir: str | None = None
    clients: int | None = None
    dirichlet: float | None = None
    rounds: int | None = None
    seed: int = 0
    trust: str = "server"
    groups: str | None = None  # hdp-plan assign's CSV (client_id, …, group)
    out: str | None = None
    cpus_per_client: float = 1.0


def run_flower(cfg: FlowerConfig, progress=print) -> dict[str, Any]:
    """Run ``cfg`` on Flower's simulation engine; ``progress`` gets one line per round. Raises ValueError (one-line
    message) for anything the user can fix, before anything is written."""
    from hdp_planner_flower.mods import TRUST_MODELS

    version = require_flwr()
    if cfg.method not in FLOWER_METHODS:
        raise ValueError(f"--method must be one of {', '.join(FLOWER_METHODS)} on Flower, got {cfg.method!r}")
    if cfg.trust not in TRUST_MODELS:
        raise ValueError(f"--trust must be one of {', '.join(TRUST_MODELS)}, got {cfg.trust!r}")
    if cfg.cpus_per_client <= 0:
        raise ValueError(f"--cpus-per-client must be > 0, got {cfg.cpus_per_client}")
    offline_env()
    from hdp_planner_flower.strategy import groups_from_file
    from hdp_planner_train.trainer import TrainConfig, _check, _write_metrics, base_metrics, round_description

    tc = TrainConfig(plan=cfg.plan, method=cfg.method, dataset=cfg.dataset, data_dir=cfg.data_dir, clients=cfg.clients,
                     dirichlet=cfg.dirichlet, rounds=cfg.rounds, seed=cfg.seed, out=cfg.out, engine="loop")  # fmt: skip
    plan, data, spec, rounds, batch, momentum = _check(tc)
    groups = groups_from_file(cfg.groups, spec) if cfg.groups else None
    if cfg.out and Path(cfg.out).exists() and not Path(cfg.out).is_dir():
        raise ValueError(f"--out {cfg.out} is not a directory")
    from hdp_planner_flower.app import DataSettings, client_app, server_app

    settings = DataSettings(cfg.dataset, cfg.data_dir, cfg.clients, cfg.dirichlet, cfg.seed, plan.config.local_steps,
                            batch, momentum, plan.config.lr, tc.lr_decay)  # fmt: skip
    holder: dict[str, Any] = {}

    def on_round(rnd: int, stats, seconds: float, res) -> None:
        acc, loss = float(res["accuracy"]), float(res["loss"])
        holder["strategy"].log.history.append({"round": rnd, "accuracy": acc, "loss": loss})
        joined = "/".join(str(j) for j in stats.joined)
        progress(f"{round_description(plan, spec, rnd, rounds, acc, loss)} joined {joined} ({seconds:.2f} s)")

    app = server_app(plan, spec, settings, rounds, holder, group_of_client=groups, trust=cfg.trust, on_round=on_round)
    progress(f"Flower {version} simulation: {spec.method} on {cfg.dataset}, {data.n_clients} nodes, trust "
             f"{cfg.trust} ({TRUST_NOTES[cfg.trust]})")  # fmt: skip
    _simulate(app, client_app(), data.n_clients, cfg.cpus_per_client)
    if "error" in holder:
        exc = holder["error"]
        raise ValueError(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    if "strategy" not in holder or "result" not in holder:
        raise RuntimeError("the Flower simulation ended without running the strategy")
    strategy = holder["strategy"]
    log = strategy.log
    metrics = base_metrics(tc, plan, spec, data, "cpu", log.next_round, int(spec_dim(data, cfg.dataset)), batch,
                           momentum, log)  # fmt: skip
    for key in ("noise_lambda_measured", "noise_lambda_applied"):  # secagg: the server never sees the noise
        if isinstance(metrics[key], float) and math.isnan(metrics[key]):
            metrics[key] = None
    metrics.update(
        {
            "runtime": "flower",
            "flwr_version": version,
            "trust": cfg.trust,
            "trust_note": TRUST_NOTES[cfg.trust],
            "noise_source": "secure (SecureNoise: the OS CSPRNG); sampling from os.urandom; no seed is written",
            "stopped": strategy.stopped,
            "clip": spec.clip,
            "groups": {"sizes": list(spec.sizes), "q": list(spec.q), "weight": list(spec.weight)},
        }
    )
    if cfg.out:
        Path(cfg.out).mkdir(parents=True, exist_ok=True)
        _write_metrics(metrics, Path(cfg.out), False)
    return metrics


def spec_dim(data, dataset: str) -> int:
    from hdp_planner_train.models import make_model

    return sum(p.numel() for p in make_model(dataset, data.num_classes).parameters())


def _simulate(app, client, nodes: int, cpus_per_client: float) -> None:
    """Flower's simulation engine, quiet: Ray and Flower log errors only."""
    from flwr.simulation import run_simulation

    logging.getLogger("flwr").setLevel(logging.ERROR)  # run_simulation's deprecation notice; client errors stay
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    backend = {
        "client_resources": {"num_cpus": cpus_per_client, "num_gpus": 0.0},
        "init_args": {"logging_level": "ERROR", "log_to_driver": False},
    }
    run_simulation(server_app=app, client_app=client, num_supernodes=nodes, backend_config=backend)
