"""What a node reads off a message before it knows what to load: the message's SecAgg+ stage and the node's own client
id, and the one answer that needs nothing else, the enrolment query's."""

from __future__ import annotations

from flwr.app import Context, Message, MetricRecord, RecordDict
from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

from hdp_planner_flower.records import HDP

TRAINING_STAGES = (None, Stage.COLLECT_MASKED_VECTORS)
"""The stages whose message trains: a trusted server's train message (no SecAgg+ stage) and SecAgg+'s masked
vector."""


def client_id(context: Context) -> int:
    """The node's client id: ``client-id`` of its node config (deployment) or ``partition-id`` (simulation)."""
    for key in ("client-id", "partition-id"):
        if key in context.node_config:
            return int(context.node_config[key])
    raise ValueError("the node config has no client-id: start the node with --node-config 'client-id=I'")


def enroll(msg: Message, ctxt: Context) -> Message:
    """Answer the server's enrolment query (register as ``@app.query("hdp_enroll")``): this node's client id."""
    return Message(RecordDict({HDP: MetricRecord({"client-id": client_id(ctxt)})}), reply_to=msg)


def stage_of(msg: Message) -> str | None:
    """The SecAgg+ stage a message belongs to, or None."""
    configs = msg.content.config_records.get(RECORD_KEY_CONFIGS) if msg.has_content() else None
    return str(configs[Key.STAGE]) if configs is not None and Key.STAGE in configs else None
