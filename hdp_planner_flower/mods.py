"""Client side: the user's local training becomes a clipped update plus its noise share (Algorithm 1, lines 11-13).

:func:`hdp_mod` wraps the user's train function (``@app.train(mods=[hdp_mod])``): the user's function trains the
model it receives and replies with the trained model, as in any Flower app; the mod replaces that reply with
Δ = θ_local − θ clipped to ‖Δ‖ ≤ C_m (``hdp_planner_train.rules.aggregate.clip_rows``) and, under the ``secagg`` trust
model, adds the client's share N(0, C_m²σ_m²/c) (``hdp_planner.rules.noise.noise_share_std``, c = the round's joined
count the server announced). The group, C_m, σ_m and c come from the server; the client only echoes the group so
that the server can refuse a reply that claims another one. :func:`enroll` answers the server's enrolment query
with the node's client id (``client-id`` in the node config, or the simulation's ``partition-id``).
"""

from __future__ import annotations

import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.clientapp.typing import ClientAppCallable

from hdp_planner.rules.noise import noise_share_std
from hdp_planner_flower.records import ARRAYS, HDP, flatten, unflatten
from hdp_planner_train.rules.aggregate import SecureNoise, clip_rows

TRUST_MODELS = ("server", "secagg")


def client_id(context: Context) -> int:
    """The node's client id: ``client-id`` of its node config (deployment) or ``partition-id`` (simulation)."""
    for key in ("client-id", "partition-id"):
        if key in context.node_config:
            return int(context.node_config[key])
    raise ValueError("the node config has no client-id: start the node with --node-config 'client-id=I'")


def private_update(delta: torch.Tensor, clip: float, noise_multiplier: float, joined: int, share: bool):
    """(clip(Δ) [+ N(0, C²σ²/c) from the OS's CSPRNG, ``SecureNoise``], whether Δ was scaled down)."""
    clipped, count = clip_rows(delta[None], clip)
    update = clipped[0]
    if share:
        update = update + SecureNoise().normal(
            update.numel(), noise_share_std(clip, noise_multiplier, joined), update.device, update.dtype
        )
    return update, bool(count)


def hdp_mod(msg: Message, ctxt: Context, call_next: ClientAppCallable) -> Message:
    """Flower mod for train messages: the reply's model becomes the clipped (and, for secagg, noised) update."""
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
    trust = str(rules["trust"])
    if trust not in TRUST_MODELS:
        raise ValueError(f"unknown trust model {trust!r}")
    update, clipped = private_update(
        flatten(local) - flatten(sent),
        float(rules["clip"]),
        float(rules["noise-multiplier"]),
        int(rules["joined"]),
        share=trust == "secagg",
    )
    reply.content[ARRAYS] = unflatten(sent, update)
    reply.content[HDP] = MetricRecord(
        {"group": int(rules["group"]), "client-id": client_id(ctxt), "clipped": int(clipped)}
    )
    return reply


def enroll(msg: Message, ctxt: Context) -> Message:
    """Answer the server's enrolment query (register as ``@app.query("hdp_enroll")``): this node's client id."""
    return Message(RecordDict({HDP: MetricRecord({"client-id": client_id(ctxt)})}), reply_to=msg)
