"""What a client agreed to before it contributes under secure aggregation: a pinned plan and its participation count.

A node pins the plan file it accepted by its SHA-256 (node config ``plan`` and ``plan-sha256``, optionally ``method``,
``groups`` and ``state-dir``; or the node process's environment, :meth:`Pin.from_environment`; in a simulation the app
is built with a :class:`Pin`). Each round, before it sends anything, the client checks the server's announcement against
its own copy of the plan (:meth:`PinnedPlan.check`): plan hash, trust model, method, its group, C_m, σ_m, q_m, the
sampled count c as SecAgg+ itself shows it (a full neighbour graph over the c sampled clients), the reconstruction
threshold, which must be max(t_m, ⌊c/2⌋ + 1) for the plan's t_m of its group (so that every released sum carries at
least t_m shares, and a strict majority: with Flower's SecAgg+, which has no consistency round, a threshold at or below
c/2 lets a server that tells two halves different dropouts rebuild both of a client's secrets), and the quantization
settings of the exact integer path. A node that accepts a sparse neighbour graph (``sparse-graph``: it trusts the
server to follow the protocol) also accepts exactly the degree and threshold of
:func:`hdp_planner.distributed.neighbours.sparse_graph` for a run of c, and nothing else. Its share is sized from the
plan's law alone, never from a count the server announces. It keeps its participations per plan hash in its node state
(:mod:`.node_state`) and refuses past the plan's cap K. With hidden participation (``--hide-sample``) it also checks
the announced cohort size and coin against its group's m and p, and its cap is its group's K cohort memberships.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from hdp_planner.distributed.neighbours import sparse_graph
from hdp_planner_flower.masks import MASK_MODULUS

if TYPE_CHECKING:
    from hdp_planner.distributed.group_law import GroupLaw
    from hdp_planner.planning.plan import Plan
    from hdp_planner_train.rules.secagg import SecaggSpec
    from hdp_planner_train.rules.specs import GroupSpec


class RoundRefused(ValueError):
    """The server's round differs from the client's pinned plan: the client sends nothing."""


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Pin:
    """The plan a node accepted (``plan`` with SHA-256 ``sha256``), the method it trains, the groups file that
    maps client ids to groups (None: the plan's group order), where it keeps its participation counts, whether it
    accepts a sparse neighbour graph (``sparse_graph``: it trusts the server to draw the graph at random), and the
    deployment's registry of node ids and client ids (``registry``, a CSV ``node_id,client_id`` written when the
    nodes' keys were registered; None: the server's word, as in a simulation)."""

    plan: str
    sha256: str
    method: str = "gdpfed+"
    groups: str | None = None
    state_dir: str | None = None
    sparse_graph: bool = False
    registry: str | None = None

    @classmethod
    def from_environment(cls) -> Pin | None:
        """The node process's own pin from ``HDP_PLAN``, ``HDP_PLAN_SHA256`` and optionally ``HDP_METHOD``,
        ``HDP_GROUPS``, ``HDP_STATE_DIR``, ``HDP_SPARSE_GRAPH`` (``1``: accept a sparse graph); None when
        ``HDP_PLAN`` is unset."""
        env = os.environ
        if not env.get("HDP_PLAN"):
            return None
        return cls(plan=env["HDP_PLAN"], sha256=env.get("HDP_PLAN_SHA256", ""), method=env.get("HDP_METHOD", "gdpfed+"),
                   groups=env.get("HDP_GROUPS") or None, state_dir=env.get("HDP_STATE_DIR") or None,
                   sparse_graph=env.get("HDP_SPARSE_GRAPH") == "1")  # fmt: skip

    @classmethod
    def from_node_config(cls, config, fallback: Pin | None = None) -> Pin:
        """The node config's pin (keys ``plan``, ``plan-sha256``, ``method``, ``groups``, ``state-dir``,
        ``sparse-graph``, ``registry``), else ``fallback``; a node with neither cannot contribute."""
        if "plan" in config:
            return cls(plan=str(config["plan"]), sha256=str(config.get("plan-sha256", "")),
                       method=str(config.get("method", "gdpfed+")),
                       groups=str(config["groups"]) if config.get("groups") else None,
                       state_dir=str(config["state-dir"]) if config.get("state-dir") else None,
                       sparse_graph=str(config.get("sparse-graph", "")).lower() in ("1", "true"),
                       registry=str(config["registry"]) if config.get("registry") else None)  # fmt: skip
        if fallback is None:
            raise RoundRefused("no pinned plan: start the node with --node-config 'plan=PATH plan-sha256=HEX'")
        return fallback


@dataclass(frozen=True, kw_only=True)
class PinnedPlan:
    """A pinned plan, read and verified by the client itself: the name of its trust model (which the server must
    announce), each client's group, and what the pinned method runs under it: each group's C_m, q_m and σ_m (z_m) in
    each round 1..T, and secure aggregation's laws (:class:`~hdp_planner_train.rules.secagg.SecaggSpec`). Plain
    records only: a node reads it back from its cache without loading the planner."""

    sha256: str
    method: str
    trust: str
    rounds: int
    group_of_client: np.ndarray
    clips: tuple[float, ...]
    q: tuple[float, ...]
    noise: tuple[tuple[float, ...], ...]
    secagg: SecaggSpec
    sparse_graph: bool = False

    def check(self, rules, *, client: int, sampled: int, share_number: int, threshold: int, keys: int,
              quantization: tuple[float, int, int, float]) -> int:  # fmt: skip
        """Refuse (:class:`RoundRefused`) a round whose announcement differs from the plan; the group."""
        if str(rules["plan-sha256"]) != self.sha256:
            raise RoundRefused("the server's plan is not the pinned one")
        if str(rules["trust"]) != self.trust or str(rules["method"]) != self.method:
            raise RoundRefused(f"the server runs {rules['method']} under {rules['trust']}; pinned: {self.method}")
        m, rnd = int(rules["group"]), int(rules["server-round"])
        if m != int(self.group_of_client[client]):
            raise RoundRefused(f"the server puts client {client} in group {m + 1}, the plan in group "
                               f"{int(self.group_of_client[client]) + 1}")  # fmt: skip
        if not 1 <= rnd <= self.rounds:
            raise RoundRefused(f"round {rnd} is outside the plan's 1..{self.rounds}")
        announced = {"clip": self.clips[m], "noise-multiplier": self.noise[rnd - 1][m], "q": self.q[m]}
        for key, want in announced.items():
            if not math.isclose(float(rules[key]), want, rel_tol=1e-12):
                raise RoundRefused(f"the server announces {key} {float(rules[key])!r}, the plan has {want!r}")
        size = int(rules["run-size"])
        secagg = self.secagg
        cohort = secagg.cohorts[m] if secagg.cohorts is not None else None
        if cohort is not None and not (size == cohort.cohort and math.isclose(float(rules["coin"]), cohort.coin,
                                                                              rel_tol=1e-12)):  # fmt: skip
            raise RoundRefused(f"the server announces a cohort of {size} with coin {float(rules['coin'])!r}; the plan "
                               f"has {cohort.cohort} and {cohort.coin!r}")  # fmt: skip
        if sampled != size:
            raise RoundRefused(f"the server announces a run of {size} clients; SecAgg+ shows {sampled} sampled")
        if not secagg.survivors > 0.5:
            raise RoundRefused(f"the plan's survivors F = {secagg.survivors} are not a strict majority")
        b = secagg.bits
        if quantization != (float(1 << (b - 1)), 1 << b, MASK_MODULUS, 1.0):
            raise RoundRefused(f"SecAgg+ quantization {quantization} is not the exact {b}-bit path")
        law = secagg.laws[m]
        if share_number != size:
            self.check_graph(law, size=size, share_number=share_number, threshold=threshold, keys=keys)
            return m
        t = law.run_threshold(size)
        if 2 * threshold <= size:
            raise RoundRefused(f"the reconstruction threshold {threshold} is at most half of the {size} clients: a "
                               f"server telling two halves different dropouts could unmask a client")  # fmt: skip
        if threshold != t:
            raise RoundRefused(f"the reconstruction threshold is {threshold}; the plan's law needs {t} "
                               f"(t = {law.threshold} of the group, a majority of {size})")  # fmt: skip
        if not t <= keys <= size:
            raise RoundRefused(f"SecAgg+ shows {keys} public keys for {size} sampled clients and threshold {t}")
        return m

    def check_graph(self, law: GroupLaw, *, size: int, share_number: int, threshold: int, keys: int) -> None:
        """Refuse a sparse neighbour graph unless this node accepts one and it is exactly the rule's for a run of
        ``size`` that releases only with the run's threshold max(t, ⌊c/2⌋ + 1) of survivors."""
        if not self.sparse_graph:
            raise RoundRefused(f"SecAgg+ shows {share_number} shares among {size} clients: this node accepts only the "
                               f"full neighbour graph (a server could choose its neighbours)")  # fmt: skip
        graph = sparse_graph(clients=size, survivors=law.run_threshold(size), colluders=law.colluders)
        if graph is None or (share_number, threshold) != (graph.degree, graph.threshold):
            need = "the full graph" if graph is None else f"{graph.degree} shares of threshold {graph.threshold}"
            raise RoundRefused(f"SecAgg+ shows {share_number} shares of threshold {threshold} among {size} clients; "
                               f"the neighbour rule needs {need}")  # fmt: skip
        if not graph.threshold <= keys <= graph.degree:
            raise RoundRefused(f"SecAgg+ shows {keys} public keys for {graph.degree} neighbours and threshold "
                               f"{graph.threshold}")  # fmt: skip


def pinned_digest(pin: Pin) -> str:
    """The pinned plan file's SHA-256, once it is the pinned one."""
    path = Path(pin.plan)
    if not path.is_file():
        raise RoundRefused(f"pinned plan {pin.plan} not found")
    digest = file_sha256(path)
    if digest != pin.sha256:
        raise RoundRefused(f"pinned plan {pin.plan} has SHA-256 {digest}, the node pinned {pin.sha256 or 'nothing'}")
    return digest


def read_pinned(pin: Pin) -> tuple[str, Plan]:
    """The pinned plan file's SHA-256 and plan, once the hash is the pinned one and the plan verifies."""
    from hdp_planner.planfile.document import PlanFileError, load_plan, plan_problems

    digest = pinned_digest(pin)
    try:
        plan = load_plan(Path(pin.plan))
    except PlanFileError as exc:
        raise RoundRefused(f"pinned plan fails verification: {exc}") from None
    problems = plan_problems(plan)
    if problems:
        raise RoundRefused(f"pinned plan fails verification: {problems[0]}")
    return digest, plan


@functools.lru_cache(maxsize=8)
def pinned_spec(pin: Pin) -> tuple[str, Plan, GroupSpec]:
    """The pinned plan's SHA-256 and plan (:func:`read_pinned`), and the pinned method as the plan's own trust model
    runs it (:func:`~hdp_planner_train.rules.specs.plan_spec`: under secure aggregation each group's law, re-derived
    and checked against the plan's trust section), derived once per process."""
    from hdp_planner_train.rules.specs import plan_spec

    digest, plan = read_pinned(pin)
    try:
        return digest, plan, plan_spec(plan, pin.method)
    except ValueError as exc:
        raise RoundRefused(str(exc)) from None


@functools.lru_cache(maxsize=8)
def load_pinned(pin: Pin) -> PinnedPlan:
    """Read, hash-check and verify the pinned plan (once per process; a node keeps it across processes:
    :func:`~.node_state.pinned_plan`)."""
    from hdp_planner.ledger.runs import DEFAULT_MAPPING_REFUSED
    from hdp_planner.trust.registry import trust_name
    from hdp_planner_flower.membership import default_groups, groups_from_file

    digest, plan, spec = pinned_spec(pin)
    if spec.secagg is None:
        raise RoundRefused(f"pinned plan {pin.plan} was not solved for secure aggregation (--trust secagg)")
    if plan.budgets_sha256 is not None and not pin.groups:
        raise RoundRefused(DEFAULT_MAPPING_REFUSED)
    groups = (groups_from_file(pin.groups, spec, plan.groups.epsilon, plan.budgets_sha256) if pin.groups else
              default_groups(spec))  # fmt: skip
    rounds = plan.config.rounds
    return PinnedPlan(sha256=digest, method=pin.method, trust=trust_name(plan.trust), rounds=rounds,
                      group_of_client=groups, clips=spec.clips, q=spec.q,
                      noise=tuple(spec.noise_at(r) for r in range(rounds)), secagg=spec.secagg,
                      sparse_graph=pin.sparse_graph)  # fmt: skip
