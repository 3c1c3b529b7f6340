"""The cohort rule on Flower: the commitment round that fixes its seed, and every member's check of its run.

A plan solved with ``--hide-sample`` runs each group's public cohorts; the cohorts are the public rule's
(:class:`~hdp_planner.distributed.cohort_rule.CohortRule`), never the server's choice. Before the first round the
server asks every node, in three queries (message type :data:`~hdp_planner_flower.records.COHORT`, step in ``hdp``):

1. ``commit``: the node draws its secret r_i from the OS's CSPRNG once per plan, keeps it in its state (the node's
   SQLite file, 0600) and answers its commitment SHA-256(r_i); asked again, it gives the same one;
2. ``reveal`` with every client's commitment: the node checks that the list holds exactly the plan's clients and its
   own commitment under its own id, binds itself to that list (its SHA-256, kept in its state: a node that has
   revealed for one list refuses to reveal for another, so a server cannot draw again until it likes the seed) and
   answers r_i;
3. ``seed`` with every client's r_i: the node checks that they open the list it bound itself to and keeps the seed
   (:func:`~hdp_planner.distributed.cohort_rule.cohort_seed`).

In each round the server names, per group, the run's clients and their node ids (``cohort-clients`` and
``cohort-nodes`` of the round's rules, comma-separated). Before it sends anything a member refuses the round
(:func:`check_run`) unless the clients are exactly the cohort the rule draws for its group and round, with itself
among them under its own node id, and the node ids are exactly those whose keys SecAgg+ shows in the run. Which
client each node id stands for comes from the deployment's registry where the node was given one (node config
``registry``: the node ids the SuperLink gave the registered keys of node authentication, and their client ids; each
node finds its own entry in it), else from the server's word (a simulation).
"""

from __future__ import annotations

import csv
import hashlib
import sqlite3
from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path

import numpy as np
from flwr.app import ConfigRecord, Context, Message, RecordDict

from hdp_planner.distributed.cohort_rule import CohortRule, cohort_seed, commitment, fresh_reveal
from hdp_planner_flower.node_state import default_state_dir, pinned_plan, private_connection, state_file
from hdp_planner_flower.pin import Pin, PinnedPlan, RoundRefused
from hdp_planner_flower.records import COHORT, HDP
from hdp_planner_flower.stages import client_id

SCHEMA = """CREATE TABLE IF NOT EXISTS cohort_seeds (
    plan_sha256 TEXT PRIMARY KEY, reveal BLOB NOT NULL, list_sha256 TEXT, seed BLOB)"""
"""Per plan: the client's secret r_i, the commitment list it revealed for, and the seed it computed."""


def list_digest(commitments: Mapping[str, str]) -> str:
    """SHA-256 of a commitment list, in order of client id: what a node binds its reveal to."""
    h = hashlib.sha256(b"hdp-planner commitment list")
    for client in sorted(commitments):
        h.update(f"{client}\x00{commitments[client]}\x00".encode())
    return h.hexdigest()


class SeedState:
    """Client ``client``'s side of the commitment round, per plan, in its node's SQLite file of ``folder`` (the
    file :class:`~hdp_planner_flower.node_state.NodeState` keeps its rounds in; same modes)."""

    def __init__(self, folder: str | Path, client: int) -> None:
        self.path = state_file(folder, client)

    def _row(self, conn: sqlite3.Connection, plan_sha256: str) -> tuple | None:
        return conn.execute("SELECT reveal, list_sha256, seed FROM cohort_seeds WHERE plan_sha256 = ?",
                            (plan_sha256,)).fetchone()  # fmt: skip

    def _connect(self) -> sqlite3.Connection:
        conn = private_connection(self.path)
        conn.execute(SCHEMA)
        return conn

    def commit(self, plan_sha256: str) -> str:
        """The client's commitment for the plan: SHA-256(r_i), r_i drawn once from the OS's CSPRNG and kept."""
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            row = self._row(conn, plan_sha256)
            if row is None:
                conn.execute("INSERT INTO cohort_seeds VALUES (?, ?, NULL, NULL)", (plan_sha256, fresh_reveal()))
                row = self._row(conn, plan_sha256)
            conn.execute("COMMIT")
        return commitment(row[0])

    def reveal(self, plan_sha256: str, commitments: Mapping[str, str], *, client: str, clients: set[str]) -> bytes:
        """r_i, once the list holds exactly ``clients`` with this client's own commitment, bound to that list."""
        if set(commitments) != clients:
            raise RoundRefused(f"the commitment list names {len(commitments)} clients; the plan has {len(clients)}")
        digest = list_digest(commitments)
        with closing(self._connect()) as conn:
            conn.execute("BEGIN IMMEDIATE")
            row = self._row(conn, plan_sha256)
            if row is None or commitments.get(client) != commitment(row[0]):
                conn.execute("ROLLBACK")
                raise RoundRefused(f"the commitment list does not hold client {client}'s commitment")
            if row[1] is not None and row[1] != digest:
                conn.execute("ROLLBACK")
                raise RoundRefused("this client has revealed for another commitment list of the plan: the seed is "
                                   "fixed")  # fmt: skip
            conn.execute("UPDATE cohort_seeds SET list_sha256 = ? WHERE plan_sha256 = ?", (digest, plan_sha256))
            conn.execute("COMMIT")
        return row[0]

    def fix_seed(self, plan_sha256: str, reveals: Mapping[str, bytes]) -> bytes:
        """The seed, once every reveal opens the commitment list this client revealed for; kept in its state."""
        commitments = {client: commitment(r) for client, r in reveals.items()}
        with closing(self._connect()) as conn:
            row = self._row(conn, plan_sha256)
            if row is None or row[1] is None or row[1] != list_digest(commitments):
                raise RoundRefused("the reveals do not open the commitment list this client revealed for")
            seed = cohort_seed(reveals, commitments)
            conn.execute("UPDATE cohort_seeds SET seed = ? WHERE plan_sha256 = ?", (seed, plan_sha256))
        return seed

    def seed(self, plan_sha256: str) -> bytes | None:
        """The seed this client computed for the plan (None: no commitment round has finished)."""
        if not self.path.is_file():
            return None
        with closing(self._connect()) as conn:
            row = self._row(conn, plan_sha256)
        return None if row is None else row[2]


def enrolled(pinned: PinnedPlan) -> tuple[tuple[str, ...], ...]:
    """Each group's registered clients as the rule names them (client ids, as text), from the pinned plan."""
    group = [int(g) for g in pinned.group_of_client]
    return tuple(tuple(str(c) for c, g in enumerate(group) if g == m) for m in range(len(pinned.clips)))


def pinned_rule(pinned: PinnedPlan, seed: bytes) -> CohortRule:
    """The cohort rule of the pinned plan under ``seed``."""
    return CohortRule(seed=seed, groups=enrolled(pinned), cohorts=tuple(g.cohort for g in pinned.secagg.cohorts))


def cohort_query(pin: Pin | None = None):
    """The node's answer to the commitment round's queries (register as ``@app.query("hdp_cohort")``)."""

    def query(msg: Message, ctxt: Context) -> Message:
        chosen = Pin.from_node_config(ctxt.node_config, pin)
        pinned = pinned_plan(chosen)
        if pinned.secagg is None or pinned.secagg.cohorts is None:
            raise RoundRefused("the pinned plan has no cohorts: there is no cohort seed to draw")
        cid = client_id(ctxt)
        state = SeedState(chosen.state_dir or default_state_dir(), cid)
        record = msg.content[HDP]
        step = str(record["step"])
        listed = dict(zip(map(str, record.get("clients", [])), map(str, record.get("values", []))))
        if step == "commit":
            value = state.commit(chosen.sha256)
        elif step == "reveal":
            clients = {c for group in enrolled(pinned) for c in group}
            value = state.reveal(chosen.sha256, listed, client=str(cid), clients=clients).hex()
        elif step == "seed":
            value = hashlib.sha256(state.fix_seed(chosen.sha256, {c: bytes.fromhex(v) for c, v in listed.items()}))
            value = value.hexdigest()
        else:
            raise RoundRefused(f"unknown step {step!r} of the commitment round")
        return Message(RecordDict({HDP: ConfigRecord({"value": value})}), reply_to=msg)

    return query


def check_run(pin: Pin, pinned: PinnedPlan, rules, *, client: int, node: int, shown: Sequence[int] | None) -> None:
    """Refuse (:class:`~hdp_planner_flower.pin.RoundRefused`) a cohort round whose run is not the rule's cohort: its
    clients exactly the rule's for the group and round, this client among them under its own node id ``node``, and
    ``shown`` (the node ids whose keys SecAgg+ shows; None without SecAgg+) exactly the run's node ids."""
    seed = SeedState(pin.state_dir or default_state_dir(), client).seed(pin.sha256)
    if seed is None:
        raise RoundRefused("no cohort seed: the server ran no commitment round for this plan")
    members = [c for c in str(rules["cohort-clients"]).split(",") if c]
    nodes = [int(n) for n in str(rules["cohort-nodes"]).split(",") if n]
    why = pinned_rule(pinned, seed).refusal(client=str(client), group=int(rules["group"]),
                                             rnd=int(rules["server-round"]), members=members)  # fmt: skip
    if why is not None:
        raise RoundRefused(why)
    if len(nodes) != len(members) or len(set(nodes)) != len(nodes) or dict(zip(members, nodes))[str(client)] != node:
        raise RoundRefused(f"the server names client {client} under another node id than its own ({node})")
    if pin.registry is not None:
        why = registry_refusal(read_registry(pin.registry), members=members, nodes=nodes, client=str(client), node=node)
        if why is not None:
            raise RoundRefused(why)
    if shown is not None and set(shown) != set(nodes):
        raise RoundRefused("SecAgg+'s run holds other nodes than the cohort's")


def read_registry(path: str | Path) -> dict[int, str]:
    """A deployment's registry (CSV ``node_id,client_id``): node id → client id (as text)."""
    try:
        with open(path, newline="") as fh:
            return {int(row["node_id"]): str(int(row["client_id"])) for row in csv.DictReader(fh)}
    except (OSError, KeyError, TypeError, ValueError) as exc:
        raise RoundRefused(f"the deployment's registry {path} cannot be read: {exc}") from None


def registry_refusal(
    registry: Mapping[int, str], *, members: Sequence[str], nodes: Sequence[int], client: str, node: int
) -> str | None:
    """Why a member refuses a run whose clients ``members`` the server names as the nodes ``nodes``, by the
    deployment's ``registry``: it does not hold this node as this client, or it names one of those nodes another
    client (a node presented under a drawn client's id); None: every pair is the registry's."""
    if registry.get(node) != client:
        return f"the deployment's registry does not hold node {node} as client {client}"
    for member, nd in zip(members, nodes):
        if registry.get(nd) != member:
            held = "no client" if nd not in registry else f"client {registry[nd]}"
            return f"the server names node {nd} client {member}; the deployment's registry holds it as {held}"
    return None


def draw_seed(grid, node_of_client: Mapping[str, int], *, timeout: float | None = None) -> bytes:
    """The server's side of the commitment round over every node (``node_of_client``: client id → node id): the
    seed every node computed, refusing (ValueError, one line) a node that refuses or a reveal that opens nothing."""
    clients = sorted(node_of_client)

    def ask(step: str, values: Sequence[str] = ()) -> dict[str, str]:
        content = {"step": step, **({"clients": clients, "values": list(values)} if values else {})}
        query = [Message(RecordDict({HDP: ConfigRecord(content)}), dst_node_id=node_of_client[c], message_type=COHORT)
                 for c in clients]  # fmt: skip
        client_of = {n: c for c, n in node_of_client.items()}
        out = {}
        for reply in grid.send_and_receive(query, timeout=timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                raise ValueError(f"node {node} refused the cohort seed's {step}: {reply.error.reason.splitlines()[0]}")
            out[client_of[node]] = str(reply.content[HDP]["value"])
        if set(out) != set(clients):
            raise ValueError(f"only {len(out)} of {len(clients)} nodes answered the cohort seed's {step}")
        return out

    commitments = ask("commit")
    reveals = ask("reveal", [commitments[c] for c in clients])
    seed = cohort_seed({c: bytes.fromhex(r) for c, r in reveals.items()}, commitments)
    computed = ask("seed", [reveals[c] for c in clients])
    if set(computed.values()) != {hashlib.sha256(seed).hexdigest()}:
        raise ValueError("the nodes computed another cohort seed than the server's")
    return seed


def server_rule(grid, members: Sequence[Sequence[int]], client_of_node: Mapping[int, int], cohorts, *,
                timeout: float | None = None) -> CohortRule:  # fmt: skip
    """The server's cohort rule: the commitment round with every node (:func:`draw_seed`), then each group's nodes
    ``members`` (node ids) as their clients ``client_of_node`` under its seed, with the plan's ``cohorts``."""
    seed = draw_seed(grid, {str(c): nd for nd, c in client_of_node.items()}, timeout=timeout)
    groups = tuple(tuple(str(client_of_node[nd]) for nd in nodes) for nodes in members)
    return CohortRule(seed=seed, groups=groups, cohorts=tuple(g.cohort for g in cohorts))


def positions(rule: CohortRule, members: Sequence[Sequence[int]], client_of_node: Mapping[int, int], *,
              rnd: int) -> list[np.ndarray]:  # fmt: skip
    """Each group's cohort of round ``rnd`` by ``rule``, as positions in the group's nodes ``members``."""
    out = []
    for m, nodes in enumerate(members):
        position = {str(client_of_node[nd]): i for i, nd in enumerate(nodes)}
        out.append(np.array([position[c] for c in rule.cohort(group=m, rnd=rnd)], dtype=np.int64))
    return out
