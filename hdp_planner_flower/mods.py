"""Client side under ``--trust server``: the user's local training becomes a clipped update (Algorithm 1, lines 11-12).

:func:`hdp_mod` wraps the user's train function (``@app.train(mods=[hdp_mod])``): the user's function trains the
model it receives and replies with the trained model, as in any Flower app; the mod replaces that reply with
Δ = θ_local − θ clipped to ‖Δ‖ ≤ C_m (``hdp_planner_train.rules.clipping.clip_rows``); the server adds the group's
noise. The reply carries only Δ, the group and the client id (echoed, so that the server can refuse a reply that
claims another group): whether Δ was clipped is data-dependent and is not sent. Under ``secagg`` the node runs
:mod:`.secagg_mod` instead.
"""

from __future__ import annotations

from flwr.app import Context, Message, MetricRecord
from flwr.clientapp.typing import ClientAppCallable

from hdp_planner.trust.names import sees_updates
from hdp_planner_flower.records import ARRAYS, HDP, flatten, unflatten
from hdp_planner_flower.stages import client_id
from hdp_planner_train.rules.clipping import clip_rows


def hdp_mod(msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod for train messages under a trusted server: the reply's model becomes the clipped update.

    Args:
        msg: The message the ClientApp received (other than train messages are passed on untouched).
        ctxt: The node's context (its node config names its client id).
        call_next: The rest of the ClientApp (the user's training).

    Returns:
        The reply, its arrays the update clipped to the plan's C and its group and client id attached.

    Raises:
        ValueError: The training replied with other arrays than it received, or the server runs secure
            aggregation.
    """
    if not msg.metadata.message_type.startswith("train"):
        return call_next(msg, ctxt)
    rules = msg.content[HDP]
    sent = msg.content[ARRAYS]
    reply = call_next(msg, ctxt)
    if reply.has_error():
        return reply
    local = reply.content[ARRAYS]
    if list(local.keys()) != list(sent.keys()):
        raise ValueError("the train function must reply with the arrays it received, trained")
    if not sees_updates(str(rules["trust"])):
        raise ValueError(f"this node clips for a trusted server; the server runs {rules['trust']!r}")
    update = clip_rows((flatten(local) - flatten(sent))[None], float(rules["clip"]))[0][0]
    reply.content[ARRAYS] = unflatten(sent, update)
    reply.content[HDP] = MetricRecord({"group": int(rules["group"]), "client-id": client_id(ctxt)})
    return reply
