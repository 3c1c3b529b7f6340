"""The ClientApp of a deployed node (:data:`client`): each message loads only what its stage needs.

A SuperNode of flwr 1.41 starts one ClientApp process per message, so what a message's process imports is most of
what it costs. :data:`client` answers

- the enrolment query (:func:`enroll`) with the node's client id from its node config;
- the cohort seed's commitment round (:func:`seed_query`, :mod:`.cohort_seed`) for plans with hidden participation;
- SecAgg+'s setup, share-keys and unmask stages with Flower's ``secaggplus_mod`` and the masks of :mod:`.masks`
  (key pairs, Shamir shares, a dropped neighbour's key share): Flower, numpy and ``cryptography``; no torch, no
  model, none of the planner's accounting;
- the one stage that trains (SecAgg+'s masked-vector stage, or a trusted server's train message) with
  :func:`~.app.deployed_round`: the pinned plan's checks, the node's count and budget, the local training, the noise
  share or the clipped update.

``tests/flower/test_node.py`` starts a process per stage and checks what it imported.
"""

from __future__ import annotations

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from hdp_planner_flower.stages import TRAINING_STAGES, enroll, stage_of


def handle(msg: Message, context: Context) -> Message:
    """A train message of either trust model, by its stage: the training stage through :func:`~.app.deployed_round`
    (torch, the model, the pinned plan), the other SecAgg+ stages through Flower's mod alone."""
    if stage_of(msg) in TRAINING_STAGES:
        from hdp_planner_flower.app import deployed_round

        return deployed_round(msg, context)
    from hdp_planner_flower.masks import masked_secaggplus_mod

    return masked_secaggplus_mod(msg, context, untrained)


def untrained(msg: Message, context: Context) -> Message:
    """The rest of the app behind the stages that do not train (SecAgg+ calls it at the masked-vector stage only)."""
    raise RuntimeError("only SecAgg+'s masked-vector stage trains")


def seed_query(msg: Message, context: Context) -> Message:
    """The cohort seed's commitment round (:func:`~.cohort_seed.cohort_query`), the plan pinned in the node config."""
    from hdp_planner_flower.cohort_seed import cohort_query

    return cohort_query()(msg, context)


client = ClientApp()
client.train()(handle)
client.query("hdp_enroll")(enroll)
client.query("hdp_cohort")(seed_query)
