"""The server's side of a plan on Flower: one ``flwr.serverapp.strategy.Strategy`` (GDPFed Algorithm 1 per round).

Per round and group m the strategy Poisson-samples the group's nodes with q_m
(``hdp_planner.rules.noise.poisson_sample`` on OS entropy; an empty round is fine), sends each sampled node the model,
its group's C_m, σ_m and the round's joined count c_m, and turns the replies into the groups' noisy sums y_m;
``hdp_planner_train.rules.release.noisy_update`` (the simulator's own code) then applies Top-k / PFA's projection and
the weights ω_m. Trust models:

- ``server``: clients send clipped updates; the server re-clips them (``clip_rows``: a no-op for honest clients)
  and adds each group's full noise N(0, C_m²σ_m²) (``group_noise``), whatever number of replies arrived;
- ``secagg``: every group's round is its own run of Flower's SecAgg+ (:mod:`.secagg_workflow`), never several
  groups in one: each sampled client sends its integer share of the distributed discrete Gaussian (sized by the
  plan's law of its group), masked; the server learns only the sum of the survivors (at least the group's t_m of
  them, or SecAgg+ releases nothing) and who was sampled and replied; it tops the sum up to the law's N shares.
  ``spec`` is then the plan's trust model's (:func:`hdp_planner_train.rules.specs.trusted_spec`) and each
  client checks the round against the plan it pinned (:mod:`.pin`). A plan solved with ``--hide-sample`` names each
  group's public cohort instead of sampling (:meth:`HdpStrategy.name_cohorts`), the cohort rule's under the seed the
  nodes fixed by commitments before the first round (:mod:`.cohort_seed`): its members check the run against the
  rule, train, flip private coins and send one masked vector each (:mod:`hdp_planner.distributed.coins`).

Nodes are mapped to groups by the server alone: an enrolment query asks every node for its client id (node config
``client-id``, or the simulation's ``partition-id``) and the plan's groups (or ``hdp-plan assign``'s file) give the
group. A federation whose node count differs from the plan's n, a missing or repeated client id, or a reply that
claims another group than the one it was sent stops the run with :class:`FlowerRunError`. Before each round the
per-group ledger (the plan's spending accountant, ``hdp_planner_train.run.ledger.privacy_ledger``) is checked:
the run stops before any group would exceed its ε.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Result, Strategy

from hdp_planner.distributed.cohort_rule import CohortRule
from hdp_planner.distributed.encoding import top_up
from hdp_planner.distributed.randomness import SecureBits
from hdp_planner.planning.plan import Plan
from hdp_planner.rules.noise import SecureRandom, poisson_sample
from hdp_planner.trust.registry import trust_name
from hdp_planner_flower.cohort_seed import positions, server_rule
from hdp_planner_flower.membership import CONNECT_WAIT, FlowerRunError, default_groups, registered_members
from hdp_planner_flower.records import ARRAYS, ENROLL, HDP, TRAIN_SETTINGS, fit_config, flatten, unflatten
from hdp_planner_flower.secagg_workflow import modular_sums
from hdp_planner_train.audit.canaries import CanaryAuditor
from hdp_planner_train.rounds.loop import Account, Report, RunLog, Schedule, run_rounds
from hdp_planner_train.rules.aggregate import GroupAggregator, RoundStats, noisy_sums
from hdp_planner_train.rules.noise_sources import NoiseSource, SecureNoise
from hdp_planner_train.rules.secagg import Withheld, release, round_plan, too_few_sampled
from hdp_planner_train.rules.specs import GroupSpec
from hdp_planner_train.run.ledger import privacy_ledger
from hdp_planner_train.simulator.callbacks import CanaryAudit, NoAudit

NoiseFor = Callable[[int], NoiseSource]
"""Round (0-based) → the NoiseSource of its draws: :class:`SecureNoise` in every real run."""


def secure_source(rnd: int) -> NoiseSource:
    return SecureNoise()


class HdpStrategy(Strategy):
    """A plan's method on Flower: Poisson sampling per group, clipped updates, planned noise, ledger.

    Args:
        plan: The plan.
        spec: The method's per-group rules from the plan under the run's trust model (``spec.trust``; ``secagg``
            set where the clients add the noise under secure aggregation).
        group_of_client: Each client id's group (None: the plan's groups in client-id order).
        noise_for: Round (0-based) → the source of its noise draws (a secure source in every real run).
        uniform: The source of who joins a round (None: the OS CSPRNG, never a seed).
        on_round: Called after every round (:data:`~hdp_planner_train.rounds.loop.Report`).
        account: The run's account in the privacy ledger, released before each update (None: no ledger).
        diagnostics: Record per-round joined counts, noise and times (simulations only: they reveal who took part).
        auditor: A :class:`~hdp_planner_train.audit.canaries.CanaryAuditor` whose canaries join the rounds
            (a trusted server only).
        plan_sha256: The plan file's SHA-256, announced to pinned clients under secure aggregation.
        masks: False: secure aggregation without SecAgg+'s masks (sums in the clear; simulations with
            ``diagnostics`` only).
        node_clients: Node id → client id from a deployment's registry (None: an enrolment round asks the nodes).
        sparse_graph: SecAgg+ over the neighbour rule's sparse graph (an honest-but-curious server).

    Raises:
        FlowerRunError: A method without noise, or settings that do not go together.
    """

    def __init__(
        self,
        plan: Plan,
        spec: GroupSpec,
        *,
        group_of_client: np.ndarray | None = None,
        noise_for: NoiseFor = secure_source,
        uniform: np.random.Generator | SecureRandom | None = None,
        on_round: Report | None = None,
        account: Account | None = None,
        diagnostics: bool = False,
        auditor: CanaryAuditor | None = None,
        plan_sha256: str = "",
        masks: bool = True,
        node_clients: dict[int, int] | None = None,
        sparse_graph: bool = False,
    ) -> None:
        if not spec.private:
            raise FlowerRunError(f"{spec.method} adds no noise: run a private method of the plan on Flower")
        if auditor is not None and not spec.trust.sees_updates:
            raise FlowerRunError("--audit needs --trust server: the server inserts the canaries and adds their noise")
        self.plan_sha256 = plan_sha256  # announced to pinned clients under secagg
        if not masks and not diagnostics:
            raise FlowerRunError("--no-masks is for simulations only: it needs --diagnostics")
        self.masks = masks  # secagg without SecAgg+ (sums in the clear): simulations of long runs only
        self.sparse_graph = sparse_graph  # SecAgg+ over the neighbour rule's sparse graph: an honest-but-curious server
        self.auditor = auditor  # hdp_planner_train.audit.canaries.CanaryAuditor: canary clients through the same round
        self.audit = NoAudit(len(spec.sizes)) if auditor is None else CanaryAudit(auditor, delta=plan.config.delta,
                                                                                  progress=False)  # fmt: skip
        self.plan, self.spec, self.noise_for = plan, spec, noise_for
        self.group_of_client = default_groups(spec) if group_of_client is None else np.asarray(group_of_client)
        self.uniform = SecureRandom() if uniform is None else uniform  # who joins: OS CSPRNG, never a seed
        self.on_round = on_round
        self.account = account  # the privacy ledger's account of this run (released before each update), or None
        self.client_of_node: dict[int, int] = {}
        self.node_clients = node_clients  # node id → client id from the deployment's registry: no enrolment round
        self.members: list[list[int]] = []  # node ids of each group, in client-id order
        self.rule: CohortRule | None = None  # hidden participation: the cohort rule under the nodes' seed
        self.sent: dict[int, int] = {}  # node id → group, this round
        self.picked: list[list[int]] = []  # node ids of each group's run, this round
        self.joined: list[int] = []
        self.arrays = ArrayRecord()
        self.stats = RoundStats(joined=[], clipped=0, lambda_measured=math.nan, lambda_applied=math.nan)
        self.aggregator = GroupAggregator(spec)  # PFA's public history lives here between rounds
        self.log = RunLog(diagnostics=diagnostics)  # per-round joined counts, noise, times reveal who took part
        self.stopped: str | None = None

    # ------------------------------------------------------------------ enrolment
    def enroll(self, grid: Grid, *, timeout: float | None = None, wait: float = 600.0) -> None:
        """Ask every node for its client id; refuse a federation that is not the plan's n clients (nodes still
        connecting are waited for up to ``wait`` seconds; more than n nodes are refused at once). With a deployment's
        registry (``node_clients``) no message is sent: :func:`~.membership.registered_members`."""
        n = self.spec.n
        if self.node_clients is not None:
            self.set_members(registered_members(grid, self.node_clients, n=n, wait=min(wait, CONNECT_WAIT)))
            return
        deadline = time.monotonic() + wait
        nodes = sorted(grid.get_node_ids())
        while len(nodes) < n and time.monotonic() < deadline:
            time.sleep(1.0)
            nodes = sorted(grid.get_node_ids())
        if len(nodes) != n:
            raise FlowerRunError(f"the federation has {len(nodes)} nodes but the plan has n = {n} clients")
        query = [Message(RecordDict(), dst_node_id=node, message_type=ENROLL) for node in nodes]
        seen: dict[int, int] = {}
        for reply in grid.send_and_receive(query, timeout=timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                raise FlowerRunError(f"node {node} failed to enrol: {reply.error.reason.splitlines()[0]}")
            cid = int(reply.content[HDP]["client-id"])
            if not 0 <= cid < n:
                raise FlowerRunError(f"node {node} reports client id {cid}, outside the plan's 0..{n - 1}")
            if cid in seen.values():
                raise FlowerRunError(f"two nodes report client id {cid}")
            seen[node] = cid
        if len(seen) != n:
            raise FlowerRunError(f"only {len(seen)} of {n} nodes answered the enrolment")
        self.set_members(seen)

    def set_members(self, seen: dict[int, int]) -> None:
        """Node id → client id of the whole federation: each group's nodes, in client-id order."""
        self.client_of_node = seen
        by_client = sorted(seen, key=seen.__getitem__)
        self.members = [
            [nd for nd in by_client if self.group_of_client[seen[nd]] == m] for m in range(len(self.spec.sizes))
        ]

    # ------------------------------------------------------------------ rounds
    def affordable(self, rounds: int) -> bool:
        """Whether every group stays within its ε after ``rounds`` rounds (the plan's spending accountant)."""
        return all(
            e["epsilon_spent"] <= e["epsilon_budget"] * (1 + 1e-9) for e in privacy_ledger(self.plan, self.spec, rounds)
        )

    def sample(self, server_round: int) -> list[list[int]]:
        """Poisson-sample every group's nodes with q_m (OS entropy), or name its cohort (:meth:`name_cohorts`);
        remembers who was sent what. With the audit, a
        group's canaries are drawn with its nodes (:meth:`~hdp_planner_train.audit.canaries.CanaryAuditor.take`)."""
        sizes = [len(nodes) for nodes in self.members]
        if self.spec.secagg is not None and self.spec.secagg.cohorts is not None:
            drawn = self.name_cohorts(server_round)
        else:
            drawn = [poisson_sample(self.uniform, size=size + e, q=q) for size, e, q in zip(sizes, self.audit.extra,
                                                                                           self.spec.q)]  # fmt: skip
            drawn = self.audit.take(drawn, [0] * len(sizes), sizes)
        self.picked = picked = [[nodes[i] for i in idx] for nodes, idx in zip(self.members, drawn)]
        self.joined = [len(p) for p in picked]
        self.sent = {node: m for m, p in enumerate(picked) for node in p}
        return picked

    def name_cohorts(self, server_round: int) -> list[np.ndarray]:
        """Hidden participation: each group's cohort of the round by the rule (:func:`~.cohort_seed.positions`)."""
        return positions(self.rule, self.members, self.client_of_node, rnd=server_round)

    def draw_rule(self, grid: Grid, *, timeout: float | None = None) -> None:
        """Hidden participation: the cohort rule, its seed from every node (:func:`~.cohort_seed.server_rule`)."""
        try:
            self.rule = server_rule(grid, self.members, self.client_of_node, self.spec.secagg.cohorts, timeout=timeout)
        except ValueError as exc:
            raise FlowerRunError(str(exc)) from None

    def rules(self, server_round: int, *, m: int) -> ConfigRecord:
        """What group m's sampled nodes are told this round (under secagg a pinned client checks every field; the
        run size is the group's sampled count, checked against what SecAgg+ itself shows)."""
        spec = self.spec
        sigma = spec.noise_at(server_round - 1)
        rules = {
            "group": m,
            "clip": float(spec.clips[m]),
            "noise-multiplier": float(sigma[m]),  # pooled: C_mσ_m = s, the pool's std, for every m
            "joined": sum(self.joined) if spec.pooled else self.joined[m],  # pooled: the pool's c
            "trust": trust_name(spec.trust),
            "server-round": server_round,
        }
        if spec.secagg is not None:
            rules.update({"q": float(spec.q[m]), "method": spec.method, "plan-sha256": self.plan_sha256})
            rules["run-size"] = self.joined[m]
            if spec.secagg.cohorts is not None:  # hidden participation: the member's coin, the run's clients and nodes
                rules["coin"] = float(spec.secagg.cohorts[m].coin)
                rules["cohort-nodes"] = ",".join(str(nd) for nd in self.picked[m])  # scalars: FitIns' config
                rules["cohort-clients"] = ",".join(str(self.client_of_node[nd]) for nd in self.picked[m])
        return ConfigRecord(rules)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        """Poisson-sample every group's nodes with q_m; one message per sampled node with its group's rules."""
        picked = self.sample(server_round)
        self.arrays = arrays
        messages = []
        for m, nodes in enumerate(picked):
            rules = self.rules(server_round, m=m)
            for node in nodes:
                content = RecordDict({ARRAYS: arrays, HDP: rules, TRAIN_SETTINGS: config})
                messages.append(Message(content, dst_node_id=node, message_type="train", group_id=str(server_round)))
        return messages

    def secure_round(
        self, grid: Grid, *, server_round: int, arrays: ArrayRecord, config: ConfigRecord, timeout: float | None
    ) -> tuple[ArrayRecord, MetricRecord]:
        """One round under secagg (:mod:`.secagg_workflow`): one SecAgg+ run per group, all at once (each group's
        nodes are its own), with the group's own threshold max(t_m, ⌊c_m/2⌋ + 1); a group with fewer than t_m
        sampled clients, or whose run halts, contributes nothing;
        each released sum is topped up to the law's N shares (the N − c_m that every outcome needs drawn while the
        clients work, the rest once the survivors are known); then the simulator's update rule."""
        rnd, sa = server_round - 1, self.spec.secagg
        picked = self.sample(server_round)
        self.arrays = arrays
        theta = flatten(arrays)

        def group_sum(m: int, nodes: list[int]) -> np.ndarray | Withheld:
            plan = round_plan(sa, rnd=rnd, group=m)
            if len(nodes) < plan.law.threshold:
                return too_few_sampled(m, sampled=len(nodes), threshold=plan.law.threshold)
            law, early = plan.law, max(0, plan.law.shares - len(nodes))  # shares the server adds whoever survives
            configs = {n: fit_config(self.rules(server_round, m=m), config) for n in nodes}
            with ThreadPoolExecutor(1) as pool:  # drawn while the clients work: off the round's critical path
                base = pool.submit(top_up, np.zeros(law.encoding.padded, dtype=np.int64), missing=early,
                                   share_sigma2=law.share_sigma2, modulus=law.encoding.modulus,
                                   bits=SecureBits())  # fmt: skip
                out = modular_sums(grid, configs=configs, server_round=server_round, arrays=arrays, bits=sa.bits,
                                   threshold=law.run_threshold(len(nodes)), masks=self.masks,
                                   timeout=timeout, sparse=self.sparse_graph, colluders=law.colluders)  # fmt: skip
                if out is None:
                    return Withheld(group=m, reason="SecAgg+ halted: fewer replies than its threshold")
                totals, alive = out
                return release(np.mod(totals + base.result(), law.encoding.modulus), plan, len(alive) + early,
                               SecureBits())  # fmt: skip

        with ThreadPoolExecutor(len(picked)) as groups:  # the groups' runs at once: their nodes are disjoint
            ys = list(groups.map(group_sum, range(len(picked)), picked))
        withheld = tuple(y for y in ys if isinstance(y, Withheld))
        sums = [torch.zeros_like(theta) if isinstance(y, Withheld) else torch.as_tensor(y, dtype=theta.dtype)
                for y in ys]  # fmt: skip
        update, self.stats = self.aggregator.release(sums, None, self.noise_for(rnd), joined=list(self.joined),
                                                     clipped=0, withheld=withheld)  # fmt: skip
        return unflatten(arrays, theta + update), MetricRecord({"joined": sum(self.joined), "withheld": len(withheld)})

    def aggregate_train(self, server_round: int, replies: Iterable[Message]) -> tuple[ArrayRecord, MetricRecord]:
        """θ + Σ_m ω_m·Top_k(y_m) for the model sent in this round; the round's statistics in ``self.stats``."""
        rows, failed = self.group_rows(replies)
        theta = flatten(self.arrays)
        source = self.noise_for(server_round - 1)
        ys, noises, clipped = self.noisy_sums(rows, d=theta.numel(), rnd=server_round - 1, source=source)
        update, self.stats = self.aggregator.release(ys, noises, source, joined=list(self.joined), clipped=clipped,
                                                     observe=self.audit.observers.observe)  # fmt: skip
        return unflatten(self.arrays, theta + update), MetricRecord({"joined": sum(self.joined), "failed": failed})

    def group_rows(self, replies: Iterable[Message]) -> tuple[list[dict[int, torch.Tensor]], int]:
        """The replies' updates per group, keyed by client id; refuses replies the server did not ask for or that
        claim another group. Replies with an error count as dropouts."""
        rows: list[dict[int, torch.Tensor]] = [{} for _ in self.spec.sizes]
        failed = 0
        for reply in replies:
            if reply.has_error():  # a dropout; for a node that went away Flower's SuperLink answers in its own name
                failed += 1
                continue
            node = reply.metadata.src_node_id
            if node not in self.sent:
                raise FlowerRunError(f"node {node} replied to a round it was not sampled for")
            m, cid = self.sent[node], self.client_of_node[node]
            meta = reply.content[HDP]
            if int(meta["group"]) != m or int(meta["client-id"]) != cid:
                raise FlowerRunError(
                    f"client {cid} (node {node}) claims group {int(meta['group']) + 1} / client "
                    f"{int(meta['client-id'])}; the plan puts it in group {m + 1}: reply refused"
                )
            rows[m][cid] = flatten(reply.content[ARRAYS])
        return rows, failed

    def noisy_sums(self, rows: list[dict[int, torch.Tensor]], *, d: int, rnd: int, source: NoiseSource):
        """(y_m per group, or one pooled y; their noises, or None under secagg; clipped count)."""
        spec = self.spec
        sigma = spec.noise_at(rnd)
        ordered = [torch.stack([r[c] for c in sorted(r)]) if r else torch.zeros(0, d) for r in rows]
        ordered = self.audit.insert_grouped(ordered, rnd)  # canaries go through the same clipping and noise
        if spec.secagg is not None:
            raise FlowerRunError("secure aggregation's rounds run through secure_round")
        return noisy_sums([r.to(torch.float32) for r in ordered], spec, sigma, source)  # the simulator's aggregator

    def start(
        self,
        grid: Grid,
        initial_arrays: ArrayRecord,
        num_rounds: int = 3,
        timeout: float = 3600,
        train_config: ConfigRecord | None = None,
        evaluate_config: ConfigRecord | None = None,
        evaluate_fn: Callable[[int, ArrayRecord], MetricRecord | None] | None = None,
    ) -> Result:
        """Enrol the nodes, then drive the simulator's round loop
        (:func:`hdp_planner_train.rounds.loop.run_rounds`): one Flower round per step, the ledger released before its
        model exists, central evaluation after every round, and a stop before any round that a group's ε cannot
        afford."""
        result = Result()
        result.arrays = initial_arrays
        train_config = ConfigRecord() if train_config is None else train_config

        def step(r: int, lr: float) -> tuple[RoundStats, Callable[[], None]]:
            rnd = r + 1  # Flower counts rounds from 1; each client decays its own learning rate by the round
            if self.spec.secagg is not None:
                arrays, metrics = self.secure_round(grid, server_round=rnd, arrays=result.arrays, config=train_config,
                                                    timeout=timeout)  # fmt: skip
            else:
                messages = self.configure_train(rnd, result.arrays, train_config, grid)
                arrays, metrics = self.aggregate_train(rnd, grid.send_and_receive(messages, timeout=timeout))

            def apply_update() -> None:
                result.arrays = arrays
                result.train_metrics_clientapp[rnd] = metrics

            return self.stats, apply_update

        def evaluate(r: int, lr: float) -> dict[str, float] | None:
            res = evaluate_fn(r + 1, result.arrays) if evaluate_fn else None
            if res is None:
                return None
            result.evaluate_metrics_serverapp[r + 1] = res
            return {"round": r + 1, "accuracy": float(res["accuracy"]), "loss": float(res["loss"])}

        def stop(r: int) -> str | None:
            return None if self.affordable(r + 1) else f"stopped before round {r + 1}: a group would exceed its ε"

        try:
            self.enroll(grid, timeout=timeout)
            if self.spec.secagg is not None and self.spec.secagg.cohorts is not None:
                self.draw_rule(grid, timeout=timeout)
            self.stopped = run_rounds(Schedule(rounds=num_rounds), self.log, step=step, evaluate=evaluate,
                                      account=self.account, report=self.on_round, stop=stop)  # fmt: skip
        finally:
            if self.account is not None:
                self.account.finish()
        return result

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> list[Message]:
        return []  # evaluation is central (the server's test set), as in the simulator

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        return None

    def summary(self) -> None:
        pass
