"""Seconds per round, our engines against pfl-research (PyPI ``pfl``) on the same workload, interleaved.

The workload is GDPFed's FMNIST Table 2 round: 6,000 clients of 10 Fashion-MNIST-shaped samples each (synthetic
pixels: the cost does not depend on their values), a cohort of 120, 5 local SGD steps of batch 10 at lr 0.1,
each update clipped to C = 1.5 and Gaussian noise N(0, C²σ²) on the sum, with the same model on both sides
(``--model cnn``: the small CNN, d = 26,010; ``cnn2-paper``: McMahan et al. 2017's, d = 1,663,370).

- ours: ``hdp_planner_train``'s own round, as ``hdp-plan train`` runs it (Poisson sampling at q = 2%, the
  engine's local training, clipping and noise through ``aggregate``), with ``--engine vectorized`` and ``loop``;
- pfl: ``FederatedAveraging`` on a ``SimulatedBackend`` with ``CentrallyAppliedPrivacyMechanism(
  GaussianMechanism)``, one process (``--threads`` threads), and with ``torchrun --nproc_per_node P`` for each
  P of ``--pfl-procs`` (the threads split among the processes). pfl samples a fixed-size cohort of 120 (ours:
  Poisson with mean 120) and runs 5 epochs over the client's 10 samples (5 steps of batch 10, as ours).

pfl is not a dependency of this project: it pins dp-accounting < 0.6 and sets torch's multiprocessing start
method on import. It runs in its own environment, outside the repository::

    python -m venv ~/venvs/pfl && ~/venvs/pfl/bin/pip install torch==2.13.0 'pfl[pytorch]'
    PYTHONPATH=. python benchmarks/bench_vs_pfl.py --pfl-python ~/venvs/pfl/bin/python [--record]

Every configuration runs in its own process (``--rounds`` timed rounds after one warm-up round); the
configurations take turns ``--repeats`` times; the script prints the load average before and after, the median
and minimum of each configuration's per-round medians, and last the two ratios (pfl's median over our
vectorized engine's; above 1 means we are faster). Without pfl it says how to set it up and exits with 2.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
N_CLIENTS, PER_CLIENT, COHORT, STEPS, BATCH, LR, CLIP, SIGMA = 6000, 10, 120, 5, 10, 0.1, 1.5, 1.0
SETUP = (
    "python -m venv ~/venvs/pfl && ~/venvs/pfl/bin/pip install torch==2.13.0 'pfl[pytorch]', "
    "then pass --pfl-python ~/venvs/pfl/bin/python"
)


def synthetic_fmnist(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """60,000 normalized 28×28 images and labels; client i holds samples 10i..10i+9."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N_CLIENTS * PER_CLIENT, 1, 28, 28), dtype=np.float32)
    return x, rng.integers(0, 10, N_CLIENTS * PER_CLIENT).astype(np.int64)


# ----------------------------------------------------------------------------- workers (one process each)


def worker_ours(engine: str, model_name: str, rounds: int, threads: int) -> list[float]:
    """Our trainer's round (trainer.run's loop body) with DP-FedAvg's rules at q = 2%, σ = SIGMA."""
    import torch
    from torch.nn.utils import parameters_to_vector

    from hdp_planner_train.learning.engines import batch_indices, local_deltas
    from hdp_planner_train.learning.models import make_model
    from hdp_planner_train.rules.aggregate import aggregate
    from hdp_planner_train.rules.noise_sources import SeededNoise
    from hdp_planner_train.rules.sampling import sample_round
    from hdp_planner_train.rules.specs import GroupSpec

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    x, y = (torch.as_tensor(a) for a in synthetic_fmnist())
    clients = [np.arange(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(N_CLIENTS)]
    q = COHORT / N_CLIENTS
    spec = GroupSpec(method="dp-fedavg", sizes=(N_CLIENTS,), q=(q,), noise_multiplier=(SIGMA,), k_ratio=(1.0,),
                     weight=(1 / COHORT,), clip=CLIP)  # fmt: skip
    model = make_model("fmnist", 10, model_name)
    theta = parameters_to_vector(model.parameters()).detach()
    times = []
    for r in range(rounds + 1):
        t0 = time.perf_counter()
        ids = np.concatenate(sample_round(spec, seed=0, rnd=r))
        idx = torch.as_tensor(batch_indices(clients, ids, steps=STEPS, batch=BATCH, seed=0, rnd=r))
        deltas = local_deltas(engine, model, theta, x[idx], y[idx], lr=LR, momentum=0.0, chunk=None)
        update, _ = aggregate(deltas, np.zeros(len(ids), np.int64), spec, SeededNoise(0, r), rnd=r, public_history=[])
        theta = theta + update
        times.append(time.perf_counter() - t0)
    return times[1:]


def worker_pfl(model_name: str, rounds: int, threads: int) -> list[float]:
    """pfl's FedAvg with central Gaussian DP on the same data and model; rank 0's times between rounds."""
    import torch
    from pfl.aggregate.simulate import SimulatedBackend
    from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
    from pfl.callback.base import TrainingProcessCallback
    from pfl.data.federated_dataset import FederatedDataset
    from pfl.data.sampling import get_user_sampler
    from pfl.hyperparam import NNTrainHyperParams
    from pfl.metrics import Metrics, Weighted
    from pfl.model.pytorch import PyTorchModel
    from pfl.privacy import CentrallyAppliedPrivacyMechanism, GaussianMechanism

    from hdp_planner_train.learning.models import make_model

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    np.random.seed(0)
    net = make_model("fmnist", 10, model_name)

    class Wrapped(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = net

        def forward(self, x):
            return self.net(x)

        def loss(self, x, y, eval=False):  # pfl's signature
            self.eval() if eval else self.train()
            return torch.nn.functional.cross_entropy(self.net(x), y.long())

        def metrics(self, x, y, eval=False):
            loss = torch.nn.functional.cross_entropy(self.net(x), y.long(), reduction="sum").item()
            return {"loss": Weighted(loss, len(y))}

    wrapped = Wrapped()
    x, y = synthetic_fmnist()
    cut = [slice(i * PER_CLIENT, (i + 1) * PER_CLIENT) for i in range(N_CLIENTS)]
    slices = [(x[c], y[c]) for c in cut]
    data = FederatedDataset.from_slices(slices, get_user_sampler("minimize_reuse", list(range(N_CLIENTS))))
    model = PyTorchModel(
        model=wrapped,
        local_optimizer_create=torch.optim.SGD,
        central_optimizer=torch.optim.SGD(wrapped.parameters(), lr=1.0),
    )
    privacy = CentrallyAppliedPrivacyMechanism(GaussianMechanism(clipping_bound=CLIP, relative_noise_stddev=SIGMA))
    backend = SimulatedBackend(training_data=data, val_data=data, postprocessors=[privacy])
    stamps: list[float] = []

    class Stamp(TrainingProcessCallback):
        def on_train_begin(self, *, model):
            stamps.append(time.perf_counter())
            return Metrics()

        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            stamps.append(time.perf_counter())
            return False, Metrics()

    params = NNAlgorithmParams(
        central_num_iterations=rounds + 1, evaluation_frequency=10**6, train_cohort_size=COHORT, val_cohort_size=0
    )
    train = NNTrainHyperParams(local_learning_rate=LR, local_num_epochs=STEPS, local_batch_size=BATCH)
    FederatedAveraging().run(params, backend, model, train, callbacks=[Stamp()])
    return list(np.diff(stamps)[1:])


# ----------------------------------------------------------------------------- driver


def _run(cmd: list[str], env: dict[str, str], tries: int = 3) -> float:
    """Median round time reported by one worker process (the last line of its stdout is a JSON list); a failed
    process is started again (torchrun's rendezvous failed now and then here), at most ``tries`` times."""
    for attempt in range(tries):
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        if done.returncode == 0:
            break
        why = [line for line in done.stderr.splitlines() if "Error" in line][-1:] or done.stderr.splitlines()[-1:]
        print(f"    ({' '.join(cmd[:4])}… failed, attempt {attempt + 1} of {tries}: {why})", flush=True)
    else:
        raise SystemExit(f"error: {' '.join(cmd[:4])}… failed {tries} times")
    times = json.loads(done.stdout.strip().splitlines()[-1])
    return statistics.median(times)


def has_pfl(python: str) -> bool:
    try:
        done = subprocess.run([python, "-c", "import pfl, torch"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pfl-python", default=os.environ.get("PFL_PYTHON"), help="a Python with pfl installed [$PFL_PYTHON]"
    )
    ap.add_argument("--model", default="cnn", help="cnn (d = 26,010) | cnn2-paper (d = 1,663,370)")
    ap.add_argument("--rounds", type=int, default=3, help="timed rounds per process (after one warm-up round)")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved processes per configuration")
    ap.add_argument("--threads", type=int, default=2, help="CPU threads in all, per configuration")
    ap.add_argument("--pfl-procs", default="2", help="comma-separated process counts for pfl under torchrun")
    ap.add_argument("--no-loop", action="store_true", help="skip our loop engine")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/bench_vs_pfl.json")
    ap.add_argument("--worker", choices=("ours", "pfl"), help=argparse.SUPPRESS)
    ap.add_argument("--engine", default="vectorized", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.worker == "ours":
        print(json.dumps(worker_ours(args.engine, args.model, args.rounds, args.threads)))
        return
    if args.worker == "pfl":
        times = worker_pfl(args.model, args.rounds, args.threads)
        if int(os.environ.get("RANK", "0")) == 0:
            print(json.dumps(times))
        return

    if args.pfl_python is None:
        print(f"error: no Python with pfl given: {SETUP}", file=sys.stderr)
        sys.exit(2)
    args.pfl_python = os.path.expanduser(args.pfl_python)
    if not has_pfl(args.pfl_python):
        print(f"error: pfl is not importable with {args.pfl_python}: {SETUP}", file=sys.stderr)
        raise SystemExit(2)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": str(args.threads)}
    me = [str(Path(__file__).resolve()), "--model", args.model, "--rounds", str(args.rounds)]
    configs: dict[str, tuple[list[str], dict[str, str]]] = {
        "ours vectorized": ([sys.executable, *me, "--worker", "ours", "--threads", str(args.threads)], env),
    }
    if not args.no_loop:
        cmd = [sys.executable, *me, "--worker", "ours", "--engine", "loop", "--threads", str(args.threads)]
        configs["ours loop"] = (cmd, env)
    configs["pfl, 1 process"] = ([args.pfl_python, *me, "--worker", "pfl", "--threads", str(args.threads)], env)
    for procs in (int(p) for p in args.pfl_procs.split(",") if p.strip()):
        per = max(1, args.threads // procs)
        launcher = [args.pfl_python, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={procs}"]
        configs[f"pfl, {procs} processes"] = (
            [*launcher, *me, "--worker", "pfl", "--threads", str(per)],
            {**env, "OMP_NUM_THREADS": str(per)},
        )

    print(
        f"FMNIST Table 2 round: {COHORT} of {N_CLIENTS:,} clients, {STEPS} steps of batch {BATCH}, --model "
        f"{args.model}, clip {CLIP}, Gaussian noise σ = {SIGMA}; {args.threads} threads per configuration"
    )
    print(f"load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    results: dict[str, list[float]] = {name: [] for name in configs}
    for rep in range(args.repeats):
        for name, (cmd, cenv) in configs.items():
            results[name].append(_run(cmd, cenv))
            print(f"  repeat {rep + 1}: {name:<20} {results[name][-1]:.3f} s/round", flush=True)
    print(f"load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    ours = statistics.median(results["ours vectorized"])
    rows = []
    for name, values in results.items():
        print(f"{name:<20} median {statistics.median(values):.3f} s/round, min {min(values):.3f}")
        rows.append((name, f"{statistics.median(values):.3f}", f"{min(values):.3f}",
                     f"{statistics.median(values) / ours:.2f}x"))  # fmt: skip
    one = statistics.median(results["pfl, 1 process"])
    multi = [statistics.median(v) for k, v in results.items() if k.startswith("pfl, ") and "processes" in k]
    notes = (
        f"pfl in one process over our vectorized engine (medians): {one / ours:.2f}x",
        f"pfl's best multi-process run over our vectorized engine: {min(multi, default=float('nan')) / ours:.2f}x",
    )
    print("\n".join(notes))
    if args.record:  # imported here: the pfl workers run this file in pfl's own environment
        from hdp_planner.report.results import Result, Table, write_result

        caption = (
            f"FMNIST Table 2 round ({COHORT} of {N_CLIENTS:,} clients, {STEPS} steps of batch {BATCH}), --model "
            f"{args.model}, {args.threads} threads per configuration, {args.repeats} interleaved processes each"
        )
        columns = ("configuration", "median (s/round)", "min (s/round)", "median / ours vectorized")
        result = Result(
            name="bench_vs_pfl",
            title="Seconds per round: our engines against pfl-research",
            tables=(Table(caption=caption, columns=columns, rows=tuple(rows)),),
            notes=notes,
        )
        print(f"written to {write_result(result)}")


if __name__ == "__main__":
    main()
