"""Server side under ``--trust secagg``: one run of Flower's own ``SecAggPlusWorkflow`` per group and round.

The strategy samples each group's nodes; :func:`modular_sums` hands them to SecAgg+ through a small legacy
``Strategy`` adaptor (the workflow only runs with Flower's legacy API) and gets back the sum of the survivors'
integer messages modulo 2^b, which :func:`~hdp_planner_train.rules.secagg.release` decodes with the simulator's
code. Every group has its own run with its own threshold max(t_m, ⌊c_m/2⌋ + 1) (the plan's law, :mod:`hdp_planner.
distributed.law`); several groups never share a run, since SecAgg+ counts its threshold over the whole run. A run
whose survivors fall below its reconstruction threshold at any stage halts: the cryptography releases nothing, so
every released sum carries at least t_m shares.

One bookkeeping fix to Flower's workflow (flwr 1.41, :class:`SecAggPlus`): a node that drops out before it has
distributed its key shares (at the setup or share-keys stage) stays in the workflow's sampled set and neighbour
lists, so at unmasking the server asks every survivor for that node's key share, which no survivor holds, and every
survivor fails (``KeyError`` in ``secaggplus_mod``'s unmask stage): the round aggregates nothing. The fix restricts
the sampled set and the neighbour lists to the nodes that distributed their shares, the only ones whose masks enter
the sum; the protocol's messages and cryptography are untouched.

The workflow's parameters make its float path an exact integer shift (see :mod:`.secagg_mod`): clipping range
2^(b−1), quantization range 2^b, modulus 2^32 and maximum weight 1. The workflow returns the survivors' mean; times
their count plus c·2^(b−1) it is the sum, exact in float64, reduced modulo 2^b.

The neighbour graph is full by default: every sampled client holds a share of every other's secrets, and SecAgg+
itself refuses a release below the run's threshold, whatever the server does. ``sparse`` runs
(:mod:`hdp_planner.distributed.neighbours`, for a server trusted to follow the protocol, and clients that accept it)
use the degree d(c) ≪ c of that rule: the server draws the ring's order from the OS's CSPRNG (Flower draws it with
``random.shuffle``, a Mersenne Twister) and halts, as the protocol asks of it, when fewer than the run's threshold
send their masked vectors.
"""

from __future__ import annotations

import secrets

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.common import FitIns, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.server.client_manager import SimpleClientManager
from flwr.server.compat import LegacyContext
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key
from flwr.server.workflow.secure_aggregation import secaggplus_workflow

from hdp_planner.distributed.neighbours import sparse_graph
from hdp_planner_flower.masks import MASK_MODULUS, secure_masks


class SampledNodes(Strategy):
    """The legacy strategy SecAgg+ asks for its clients: the nodes our strategy already sampled, each with its own
    config; it keeps the workflow's aggregate (the survivors' mean) and who the survivors are."""

    def __init__(self, configs: dict[int, dict], grid) -> None:
        self.configs, self.grid = configs, grid
        self.result: tuple[np.ndarray, set[int]] | None = None

    def configure_fit(self, server_round, parameters, client_manager):
        run_id = self.grid.run.run_id
        return [(GridClientProxy(n, self.grid, run_id), FitIns(parameters, dict(c))) for n, c in self.configs.items()]

    def aggregate_fit(self, server_round, results, failures):
        if results:
            alive = {proxy.node_id for proxy, _ in results}
            self.result = (parameters_to_ndarrays(results[0][1].parameters)[0], alive)
        return None, {}

    def initialize_parameters(self, client_manager):
        return None

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


class GridNodes(SimpleClientManager):
    """The client manager SecAgg+ logs its sample against ("sampled c clients (out of N)"): the grid's N nodes."""

    def __init__(self, grid) -> None:
        super().__init__()
        self.grid = grid

    def num_available(self) -> int:
        return len(list(self.grid.get_node_ids()))


SYSTEM_RANDOM = secrets.SystemRandom()
"""Draws the order of SecAgg+'s neighbour ring (Flower's setup stage shuffles with its module's ``random``)."""


class SecAggPlus(SecAggPlusWorkflow):
    """Flower's ``SecAggPlusWorkflow``, after the share-keys stage knowing only the nodes that shared their keys, its
    neighbour graph drawn from the OS's CSPRNG, halting when fewer than ``survivors`` send their masked vectors."""

    survivors = 2  # the run's threshold, set per run: SecAgg+ needs two clients at least

    def setup_stage(self, grid, context, state) -> bool:
        secaggplus_workflow.random = SYSTEM_RANDOM  # the ring's order: ``random.shuffle`` in Flower's setup stage
        return super().setup_stage(grid, context, state)

    def collect_masked_vectors_stage(self, grid, context, state) -> bool:
        complete = super().collect_masked_vectors_stage(grid, context, state)
        return complete and len(state.active_node_ids) >= self.survivors

    def share_keys_stage(self, grid, context, state) -> bool:
        complete = super().share_keys_stage(grid, context, state)
        shared = set(state.active_node_ids)  # their shares were forwarded: only their masks can enter the sum
        state.sampled_node_ids = shared
        state.nid_to_neighbours = {n: nb & shared for n, nb in state.nid_to_neighbours.items() if n in shared}
        return complete


def check_room(bits: int, *, sampled: int) -> None:
    """SecAgg+ carries our b-bit integers in its 2^32 modulus: the survivors' weights (2^b each) must sum below it."""
    if bits > 31 or sampled << bits >= MASK_MODULUS:
        raise ValueError(
            f"{sampled} clients of {bits} bits overflow SecAgg+'s 32-bit modulus: plan with fewer --bits (b + "
            f"log2(c) must stay below 32)"
        )


def run_secaggplus(
    grid, workflow: SecAggPlusWorkflow, *, configs: dict[int, dict], server_round: int, arrays: ArrayRecord
) -> tuple[np.ndarray, set[int]] | None:
    """One run of a SecAgg+ ``workflow`` over the nodes of ``configs`` (the model ``arrays`` and each node's config
    sent to it): (the survivors' mean of the first array, the survivors), or None when the workflow halted."""
    sampled = SampledNodes(configs, grid)
    context = Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config={})
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: server_round})
    context.state.array_records[MAIN_PARAMS_RECORD] = arrays
    workflow(grid, LegacyContext(context, strategy=sampled, client_manager=GridNodes(grid)))
    return sampled.result


def modular_sums(
    grid, *, configs: dict[int, dict], server_round: int, arrays: ArrayRecord, bits: int, threshold: int,
    masks: bool = True, timeout: float | None = None, sparse: bool = False, colluders: int = 0,
) -> tuple[np.ndarray, set[int]] | None:  # fmt: skip
    """The survivors' integer messages summed modulo 2^b, and who the survivors are, from one SecAgg+ run over the
    nodes of ``configs`` (each sent its own config); None when there are fewer than two nodes or SecAgg+ halted below
    ``threshold`` survivors. ``sparse``: the neighbour graph of :func:`~hdp_planner.distributed.neighbours.
    sparse_graph` for ``threshold`` survivors and ``colluders`` (the full graph where it has none), for a server
    trusted to follow the protocol. ``masks`` False (simulations of long runs only): the same messages without
    SecAgg+, summed in the clear; its masks cancel exactly, so the sums are equal bit for bit."""
    if len(configs) < 2:
        return None
    check_room(bits, sampled=len(configs))
    shift = 1 << (bits - 1)
    if masks:
        graph = sparse_graph(clients=len(configs), survivors=threshold, colluders=colluders) if sparse else None
        shares = (1.0, threshold) if graph is None else (graph.degree, graph.threshold)
        workflow = SecAggPlus(
            num_shares=shares[0], reconstruction_threshold=shares[1], max_weight=1.0, clipping_range=float(shift),
            quantization_range=1 << bits, modulus_range=MASK_MODULUS, timeout=timeout,
        )  # fmt: skip
        workflow.survivors = threshold
        with secure_masks():
            result = run_secaggplus(grid, workflow, configs=configs, server_round=server_round, arrays=arrays)
        if result is None:
            return None
        mean, alive = result
        total = mean * len(alive)
    else:
        parameters = compat.arrayrecord_to_parameters(arrays, keep_input=True)
        messages = [Message(compat.fitins_to_recorddict(FitIns(parameters, dict(c)), keep_input=True), dst_node_id=n,
                            message_type=MessageType.TRAIN) for n, c in configs.items()]  # fmt: skip
        ok = [r for r in grid.send_and_receive(messages, timeout=timeout) if not r.has_error()]
        if len(ok) < threshold:
            return None
        alive = {r.metadata.src_node_id for r in ok}
        total = np.sum([parameters_to_ndarrays(compat.recorddict_to_fitres(r.content, keep_input=True).parameters)[0]
                        for r in ok], axis=0)  # fmt: skip
    return np.mod(np.rint(total + len(alive) * shift).astype(np.int64), 1 << bits), alive
