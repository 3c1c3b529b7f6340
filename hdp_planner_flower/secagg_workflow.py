"""Server side under ``--trust secagg``: one run of Flower's own ``SecAggPlusWorkflow`` per group and round.

The strategy samples each group's nodes; :func:`secure_group_sum` hands them to SecAgg+ through a small legacy
``Strategy`` adaptor (the workflow only runs with Flower's legacy API) and gets back the sum of the survivors'
integer messages modulo 2^b, which :func:`~hdp_planner_train.rules.secagg.release` decodes with the simulator's
code. One run per group, not slots of one long vector: a client then sends d' values instead of M·d', and the
cost, quadratic in the clients of one run, is Σ c_m² instead of (Σ c_m)². A group with fewer than two sampled
clients cannot run SecAgg+ and releases nothing that round; so does a group whose survivors fall below the
reconstruction threshold t = ⌈F·c⌉ at any stage (SecAgg+ halts), which is what guarantees that a released sum
carries the noise of t − k honest shares.

One bookkeeping fix to Flower's workflow (flwr 1.41, :class:`SecAggPlus`): a node that drops out before it has
distributed its key shares (at the setup or share-keys stage) stays in the workflow's sampled set and neighbour
lists, so at unmasking the server asks every survivor for that node's key share, which no survivor holds, and every
survivor fails (``KeyError`` in ``secaggplus_mod``'s unmask stage): the round aggregates nothing. The fix restricts
the sampled set and the neighbour lists to the nodes that distributed their shares, the only ones whose masks enter
the sum; the protocol's messages and cryptography are untouched.

The workflow's parameters make its float path an exact integer shift (see :mod:`.secagg_mod`): clipping range
2^(b−1), quantization range 2^b, modulus 2^32, maximum weight 1 and a full neighbour graph (every sampled client
holds a share of every other's secrets). The workflow returns the survivors' mean; times their count plus
c·2^(b−1) it is the sum, exact in float64, reduced modulo 2^b.
"""

from __future__ import annotations

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.app.message_type import MessageType
from flwr.common import FitIns, parameters_to_ndarrays
from flwr.compat.common import recorddict_compat as compat
from flwr.server.compat import LegacyContext
from flwr.server.compat.grid_client_proxy import GridClientProxy
from flwr.server.strategy import Strategy
from flwr.server.workflow import SecAggPlusWorkflow
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD, MAIN_PARAMS_RECORD, Key

from hdp_planner_flower.masks import MASK_MODULUS, secure_masks
from hdp_planner_train.rules.secagg import RoundPlan, release


class SampledNodes(Strategy):
    """The legacy strategy SecAgg+ asks for its clients: the nodes our strategy already sampled; it keeps the
    workflow's aggregate (the survivors' mean) and their count."""

    def __init__(self, nodes: list[int], grid, fit_config: dict) -> None:
        self.nodes, self.grid, self.fit_config = nodes, grid, fit_config
        self.result: tuple[np.ndarray, int] | None = None

    def configure_fit(self, server_round, parameters, client_manager):
        run_id = self.grid.run.run_id
        return [(GridClientProxy(n, self.grid, run_id), FitIns(parameters, dict(self.fit_config))) for n in self.nodes]

    def aggregate_fit(self, server_round, results, failures):
        if results:
            self.result = (parameters_to_ndarrays(results[0][1].parameters)[0], len(results))
        return None, {}

    def initialize_parameters(self, client_manager):
        return None

    def configure_evaluate(self, server_round, parameters, client_manager):
        return []

    def aggregate_evaluate(self, server_round, results, failures):
        return None, {}

    def evaluate(self, server_round, parameters):
        return None


class SecAggPlus(SecAggPlusWorkflow):
    """Flower's ``SecAggPlusWorkflow``, after the share-keys stage knowing only the nodes that shared their keys."""

    def share_keys_stage(self, grid, context, state) -> bool:
        complete = super().share_keys_stage(grid, context, state)
        shared = set(state.active_node_ids)  # their shares were forwarded: only their masks can enter the sum
        state.sampled_node_ids = shared
        state.nid_to_neighbours = {n: nb & shared for n, nb in state.nid_to_neighbours.items() if n in shared}
        return complete


def check_room(bits: int, sampled: int) -> None:
    """SecAgg+ carries our b-bit integers in its 2^32 modulus: the survivors' weights (2^b each) must sum below it."""
    if bits > 31 or sampled << bits >= MASK_MODULUS:
        raise ValueError(
            f"{sampled} clients of {bits} bits overflow SecAgg+'s 32-bit modulus: plan with fewer --bits (b + "
            f"log2(c) must stay below 32)"
        )


def run_secaggplus(
    grid, workflow: SecAggPlusWorkflow, *, nodes: list[int], server_round: int, arrays: ArrayRecord, fit_config: dict
) -> tuple[np.ndarray, int] | None:
    """One run of a SecAgg+ ``workflow`` over ``nodes`` (the model ``arrays`` and ``fit_config`` sent to each):
    (the survivors' mean of the first array, their count), or None when the workflow halted."""
    sampled = SampledNodes(nodes, grid, fit_config)
    context = Context(run_id=grid.run.run_id, node_id=0, node_config={}, state=RecordDict(), run_config={})
    context.state.config_records[MAIN_CONFIGS_RECORD] = ConfigRecord({Key.CURRENT_ROUND: server_round})
    context.state.array_records[MAIN_PARAMS_RECORD] = arrays
    workflow(grid, LegacyContext(context, strategy=sampled))
    return sampled.result


def secure_group_sum(
    grid, *, nodes: list[int], server_round: int, plan: RoundPlan, threshold: int, arrays: ArrayRecord,
    fit_config: dict, timeout: float | None = None,
) -> np.ndarray | None:  # fmt: skip
    """One SecAgg+ run over ``nodes``: the decoded noisy sum of the survivors' messages, or None (nothing released:
    fewer than two nodes, or SecAgg+ halted below ``threshold`` survivors)."""
    if len(nodes) < 2:
        return None
    bits = plan.noise.encoding.bits
    check_room(bits, len(nodes))
    workflow = SecAggPlus(
        num_shares=1.0, reconstruction_threshold=threshold, max_weight=1.0, clipping_range=float(1 << (bits - 1)),
        quantization_range=1 << bits, modulus_range=MASK_MODULUS, timeout=timeout,
    )  # fmt: skip
    with secure_masks():
        result = run_secaggplus(grid, workflow, nodes=nodes, server_round=server_round, arrays=arrays,
                                fit_config=fit_config)  # fmt: skip
    if result is None:
        return None
    mean, survivors = result
    total = np.rint(mean * survivors + survivors * (1 << (bits - 1))).astype(np.int64)
    return release(np.mod(total, plan.noise.encoding.modulus), plan)


def unmasked_group_sum(
    grid, *, nodes: list[int], server_round: int, plan: RoundPlan, threshold: int, arrays: ArrayRecord,
    fit_config: dict, timeout: float | None = None,
) -> np.ndarray | None:  # fmt: skip
    """Simulations of long runs only: the same clients' messages (share mod without SecAgg+) summed in the clear.
    SecAgg+'s masks cancel exactly, so the decoded sum is bit for bit the one :func:`secure_group_sum` returns for
    the same messages; as there, nothing is released with fewer than two nodes or ``threshold`` replies."""
    if len(nodes) < 2:
        return None
    bits = plan.noise.encoding.bits
    ins = FitIns(compat.arrayrecord_to_parameters(arrays, keep_input=True), dict(fit_config))
    content = compat.fitins_to_recorddict(ins, keep_input=True)
    replies = grid.send_and_receive(
        [Message(content, dst_node_id=n, message_type=MessageType.TRAIN) for n in nodes], timeout=timeout
    )
    ok = [r for r in replies if not r.has_error()]
    if len(ok) < threshold:
        return None
    messages = [parameters_to_ndarrays(compat.recorddict_to_fitres(r.content, keep_input=True).parameters)[0]
                for r in ok]  # fmt: skip
    total = np.rint(np.sum(messages, axis=0) + len(ok) * (1 << (bits - 1))).astype(np.int64)
    return release(np.mod(total, plan.noise.encoding.modulus), plan)
