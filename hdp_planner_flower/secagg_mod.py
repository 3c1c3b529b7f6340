"""Client side under ``--trust secagg``: Flower's own SecAgg+ mod around a mod that turns the trained model into the
client's integer share of the distributed discrete Gaussian (the core's :func:`~hdp_planner_train.rules.secagg.
client_message`, the code the simulator runs).

``mods=secagg_mods(pin)`` is ``[masked_secaggplus_mod, share_mod]``: SecAgg+ runs its four stages (keys, shares, masked
vector, unmasking) with :func:`~hdp_planner_flower.masks.chacha_masks`; at the masked-vector stage it calls
:func:`share_mod`, which checks the round against the pinned plan (:mod:`.pin`), counts the participation, calls the
user's train function with the ordinary message (``arrays``, ``hdp``, ``train`` records), and replies with y − 2^(b−1)
for the integer message y mod 2^b, its share sized by the plan's law of its group alone. With SecAgg+'s clipping range
2^(b−1), quantization range 2^b, modulus 2^32, weight 1 and maximum weight 1, its quantizer maps that reply back to y
exactly, so the server's unmasked sum is Σy modulo 2^b bit for bit. Nothing else travels: no metrics, a constant example
count. In a cohort round (a plan solved with ``--hide-sample``) the member's private coin, from the OS's CSPRNG,
multiplies its rounded update before its share is added (:mod:`hdp_planner.distributed.coins`): heads and tails send
the same message; a member whose training fails sends its share alone. Before that the member refuses a run that is not
exactly the cohort rule's (:func:`~hdp_planner_flower.cohort_seed.check_run`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from flwr.app import ArrayRecord, Context, Message, RecordDict
from flwr.clientapp.typing import ClientAppCallable
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_STATE
from flwr.compat.common import recorddict_compat as compat

from hdp_planner.distributed.coins import flip
from hdp_planner.distributed.randomness import SecureBits
from hdp_planner_flower.cohort_seed import check_run
from hdp_planner_flower.masks import MASK_MODULUS, masked_secaggplus_mod
from hdp_planner_flower.node_state import admit_round, pinned_plan
from hdp_planner_flower.pin import Pin
from hdp_planner_flower.records import ARRAYS, HDP, TRAIN_SETTINGS, flatten, split_config
from hdp_planner_flower.stages import client_id
from hdp_planner_train.rules.secagg import client_message, round_plan


def share_mod(pin: Pin | None = None, masked: bool = True) -> Callable[[Message, Context, ClientAppCallable], Message]:
    """The client mod inside SecAgg+ that adds the node's noise share, for a node pinned to a plan.

    Args:
        pin: The plan the node pins (a node config ``plan`` overrides it).
        masked: False: no SecAgg+ around it (simulations of long runs only,
            :func:`~.secagg_workflow.modular_sums`): the round's counts are the announced ones.

    Returns:
        The mod, ``(msg, ctxt, call_next) -> Message``.
    """

    def mod(msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
        chosen = Pin.from_node_config(ctxt.node_config, pin)
        pinned = pinned_plan(chosen)
        ins = compat.recorddict_to_fitins(msg.content, keep_input=True)
        rules, settings = split_config(ins.config)
        cid = client_id(ctxt)
        m = pinned.check(rules, client=cid, **(secaggplus_view(ctxt) if masked else announced_view(rules, pinned)))
        if pinned.secagg.cohorts is not None:  # the run must be the cohort rule's, under the nodes' seed
            check_run(chosen, pinned, rules, client=cid, node=int(ctxt.node_id),
                      shown=run_nodes(ctxt) if masked else None)  # fmt: skip
        admit_round(chosen, ctxt, server_round=int(rules["server-round"]), secure=True)
        sent = ArrayRecord(parameters_to_ndarrays(ins.parameters))
        secagg, rnd = pinned.secagg, int(rules["server-round"]) - 1
        cohorts = secagg.cohorts
        try:
            reply = call_next(Message(RecordDict({ARRAYS: sent, HDP: rules, TRAIN_SETTINGS: settings}), reply_to=msg),
                              ctxt)  # fmt: skip
        except Exception:
            if cohorts is None:
                raise
            reply = None
        if cohorts is None and reply.has_error():
            return reply
        if reply is None or reply.has_error():  # a cohort member that failed to train sends its share alone
            delta, coin = np.zeros(secagg.model_dim), 0
        else:
            delta = (flatten(reply.content[ARRAYS]) - flatten(sent)).double().numpy()
            coin = 1 if cohorts is None else int(flip(cohorts[m].coin, SecureBits()))  # the member's private coin
        if delta.shape != (secagg.model_dim,):
            raise ValueError(f"no share to send: the update has {delta.size} values, the plan's d is "
                             f"{secagg.model_dim}")  # fmt: skip
        y = client_message(delta, round_plan(secagg, rnd=rnd, group=m), SecureBits(), coin)  # the plan's share
        shifted = y - float(1 << (secagg.bits - 1))
        res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([shifted]), num_examples=1, metrics={})
        return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

    return mod


def secaggplus_view(ctxt: Context) -> dict:
    """The round as SecAgg+ shows it to this node (its state after the share-keys stage)."""
    state = ctxt.state.config_records[RECORD_KEY_STATE]
    return dict(sampled=int(state["sample_num"]), share_number=int(state["share_num"]),
                threshold=int(state["threshold"]), keys=len(state.get("public_keys_dict:K", [])),
                quantization=(float(state["clipping_range"]), int(state["target_range"]), int(state["mod_range"]),
                              float(state["max_weight"])))  # fmt: skip


def run_nodes(ctxt: Context) -> list[int]:
    """The node ids whose public keys SecAgg+ shows this node in its run (its state after the share-keys stage)."""
    return [int(k) for k in ctxt.state.config_records[RECORD_KEY_STATE].get("public_keys_dict:K", [])]


def announced_view(rules, pinned) -> dict:
    """Without SecAgg+ (masks off): the announced run size stands for what SecAgg+ would show."""
    size, sa = int(rules["run-size"]), pinned.secagg
    exact = (float(1 << (sa.bits - 1)), 1 << sa.bits, MASK_MODULUS, 1.0)
    law = sa.laws[int(rules["group"])]
    return dict(sampled=size, share_number=size, threshold=law.run_threshold(size), keys=size, quantization=exact)


def secagg_mods(pin: Pin | None = None, masks: bool = True) -> list:
    """The train mods of a node under ``--trust secagg``: SecAgg+ (cryptographic masks) around :func:`share_mod`.

    Args:
        pin: The plan the node pins (a node config ``plan`` overrides it).
        masks: False: the share mod alone (simulations of long runs only).

    Returns:
        The mods, outermost first.
    """
    return [masked_secaggplus_mod, share_mod(pin)] if masks else [share_mod(pin, masked=False)]
