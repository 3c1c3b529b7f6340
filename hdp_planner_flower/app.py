"""The ClientApp, the initial model and central evaluation for the trainer's datasets and models under a plan.

The ClientApp's train function is ordinary user code (the model it receives, τ local SGD steps on the node's own
data, the trained model back); :func:`~hdp_planner_flower.mods.hdp_mod` turns its reply into the private update.
The server side (:mod:`hdp_planner_flower.simulation`) starts from :func:`model_arrays` and evaluates centrally with
:func:`central_evaluation`. Used by ``hdp-plan flower`` (Flower's simulation engine) and ``examples/flower``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from hdp_planner_flower.mods import hdp_mod
from hdp_planner_flower.pin import Pin
from hdp_planner_flower.records import ARRAYS, HDP, TRAIN_SETTINGS, flatten, unflatten
from hdp_planner_flower.stages import client_id, enroll
from hdp_planner_train.learning.engines import batch_indices, evaluate, vectorized_deltas
from hdp_planner_train.learning.federated import load_federated
from hdp_planner_train.learning.models import make_model

CLIENT_STREAM = 1000  # randomness stream of client i's local batches: SeedSequence([seed, round, 1000 + i])


@dataclass(frozen=True, kw_only=True)
class DataSettings:
    """What every node needs to load its own partition (sent by the server with each round)."""

    dataset: str
    data_dir: str | None
    clients: int | None
    dirichlet: float | None
    seed: int
    local_steps: int
    batch_size: int
    momentum: float
    lr: float
    lr_decay: float

    def record(self) -> ConfigRecord:
        return ConfigRecord(
            {
                "dataset": self.dataset,
                "data-dir": self.data_dir or "",
                "clients": -1 if self.clients is None else self.clients,
                "dirichlet": -1.0 if self.dirichlet is None else self.dirichlet,
                "seed": self.seed,
                "local-steps": self.local_steps,
                "batch-size": self.batch_size,
                "momentum": self.momentum,
                "lr": self.lr,
                "lr-decay": self.lr_decay,
            }
        )

    @classmethod
    def from_record(cls, r: ConfigRecord) -> DataSettings:
        return cls(
            dataset=str(r["dataset"]),
            data_dir=str(r["data-dir"]) or None,
            clients=None if int(r["clients"]) < 0 else int(r["clients"]),
            dirichlet=None if float(r["dirichlet"]) < 0 else float(r["dirichlet"]),
            seed=int(r["seed"]),
            local_steps=int(r["local-steps"]),
            batch_size=int(r["batch-size"]),
            momentum=float(r["momentum"]),
            lr=float(r["lr"]),
            lr_decay=float(r["lr-decay"]),
        )


@lru_cache(maxsize=2)
def _data(dataset: str, data_dir: str | None, clients: int | None, dirichlet: float | None, seed: int):
    return load_federated(dataset, data_dir, clients=clients, dirichlet=dirichlet, seed=seed)


def train(msg: Message, context: Context) -> Message:
    """The user's side: τ SGD steps from the received model on this node's data; replies with the trained model."""
    torch.set_num_threads(1)
    s = DataSettings.from_record(msg.content[TRAIN_SETTINGS])
    rnd = int(msg.content[HDP]["server-round"]) - 1
    data = _data(s.dataset, s.data_dir, s.clients, s.dirichlet, s.seed)
    cid = client_id(context)
    model = make_model(s.dataset, data.num_classes)
    sent = msg.content[ARRAYS]
    theta = flatten(sent)
    idx = torch.as_tensor(_own_batches(data, cid, s, rnd))
    xs, ys = torch.as_tensor(data.x_train)[idx], torch.as_tensor(data.y_train)[idx]
    delta = vectorized_deltas(model, theta, xs, ys, lr=s.lr * s.lr_decay**rnd, momentum=s.momentum)[0]
    return Message(RecordDict({ARRAYS: unflatten(sent, theta + delta)}), reply_to=msg)


def _own_batches(data, cid: int, s: DataSettings, rnd: int) -> np.ndarray:
    """(1, τ, B) indices of client ``cid``'s local batches this round (its own randomness stream)."""
    return batch_indices(data.clients, np.array([cid]), steps=s.local_steps, batch=s.batch_size, seed=s.seed, rnd=rnd,
                         stream=CLIENT_STREAM + cid)  # fmt: skip


def client_app(
    train_fn: Callable[[Message, Context], Message] = train,
    mods: list | None = None,
    pin: Pin | None = None,
    secagg: bool | None = None,
    masks: bool = True,
) -> ClientApp:
    """A ClientApp that trains under a plan, with the enrolment query.

    Args:
        train_fn: The user's training (default :func:`train`, the trainer's datasets).
        mods: The user's own mods, outermost.
        pin: The plan a node pins (:class:`~.pin.Pin`; a node config ``plan`` overrides it).
        secagg: Innermost, Flower's SecAgg+ around the share mod (:func:`~.secagg_mod.secagg_mods`) if true, else
            :func:`~.mods.hdp_mod` (a trusted server); None: secure aggregation when ``pin`` is given.
        masks: False: the share mod alone, without SecAgg+ (simulations only).

    Returns:
        The ClientApp.
    """
    from hdp_planner_flower.cohort_seed import cohort_query
    from hdp_planner_flower.secagg_mod import secagg_mods

    secure = pin is not None if secagg is None else secagg
    app = ClientApp()
    app.train(mods=[*(mods or []), *(secagg_mods(pin, masks) if secure else [hdp_mod])])(train_fn)
    app.query("hdp_enroll")(enroll)
    app.query("hdp_cohort")(cohort_query(pin))
    return app


@cache
def deployed_apps() -> tuple[ClientApp, ClientApp]:
    """A deployed node's two apps, built once per process: (SecAgg+'s, a trusted server's)."""
    from hdp_planner_flower.node_state import guard_mod

    return client_app(train, secagg=True), client_app(train, mods=[guard_mod], secagg=False)


def deployed_round(msg: Message, context: Context) -> Message:
    """The training stage of a deployed node (``flower-supernode --node-config "client-id=I plan=PATH
    plan-sha256=HEX state-dir=DIR"``; :mod:`.node` sends it here), for runs of either trust model: SecAgg+'s
    masked-vector stage through :func:`client_app`'s secure mods (the plan pinned in the node config), a trusted
    server's train message through its mod after the node's own count and budget check
    (:func:`~.node_state.guard_mod`)."""
    from hdp_planner_flower.stages import stage_of

    secure, trusted = deployed_apps()
    return (secure if stage_of(msg) is not None else trusted)(msg, context)


def model_arrays(dataset: str, *, num_classes: int, seed: int) -> ArrayRecord:
    """The initial model as the simulator makes it (``torch.manual_seed(seed)``, then the dataset's model)."""
    torch.manual_seed(seed)
    return ArrayRecord(torch_state_dict=make_model(dataset, num_classes).state_dict())


def central_evaluation(dataset: str, data):
    """evaluate_fn(round, arrays) → MetricRecord(accuracy %, loss) on the test set."""
    model = make_model(dataset, data.num_classes)
    x_test, y_test = torch.as_tensor(data.x_test), torch.as_tensor(data.y_test)

    def evaluate_fn(rnd: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        acc, loss = evaluate(model, x_test, y_test)
        return MetricRecord({"accuracy": acc, "loss": loss})

    return evaluate_fn
