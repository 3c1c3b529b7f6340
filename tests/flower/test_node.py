"""A deployed node's ClientApp loads per stage only what the stage needs: SecAgg+'s setup, share-keys and unmask
stages and the enrolment query run in a fresh process without torch and without the planner's accounting; the
training stage loads them (which shows that the check sees an import)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("flwr")

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "scipy", "dp_accounting", "sqlalchemy", "sklearn", "hdp_planner.accounting", "hdp_planner_train")
"""What a stage that does not train must not import: torch, the planner's accounting and what it stands on."""

STAGES = """
import json, sys
import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.common import Code, FitRes, Status, ndarrays_to_parameters
from flwr.compat.common import recorddict_compat as compat
from flwr.common.secure_aggregation.secaggplus_constants import Stage

from hdp_planner_flower.local import InProcessGrid
from hdp_planner_flower.masks import masked_secaggplus_mod
from hdp_planner_flower.node import client
from hdp_planner_flower.stages import stage_of
from hdp_planner_flower.records import ENROLL
from hdp_planner_flower.secagg_workflow import modular_sums

HEAVY = %r
seen = []

def zeros(msg, ctxt):  # stands for the training stage, whose imports are not checked here
    res = FitRes(Status(Code.OK, ""), ndarrays_to_parameters([np.zeros(4)]), num_examples=1, metrics={})
    return Message(compat.fitres_to_recorddict(res, keep_input=True), reply_to=msg)

def node(msg, ctxt):
    if stage_of(msg) == Stage.COLLECT_MASKED_VECTORS:
        return masked_secaggplus_mod(msg, ctxt, zeros)
    seen.append(stage_of(msg))
    return client(msg, ctxt)

loaded = lambda: sorted(h for h in HEAVY if any(m == h or m.startswith(h + ".") for m in sys.modules))
assert not loaded(), loaded()
grid = InProcessGrid(node, 3)
out = modular_sums(grid, configs={n: {} for n in grid.node_ids}, server_round=1,
                   arrays=ArrayRecord([np.zeros(4, dtype=np.float32)]), bits=16, threshold=2)
query = Message(RecordDict(), dst_node_id=grid.node_ids[1], message_type=ENROLL)
enrolled = int(client(query, grid.contexts[grid.node_ids[1]]).content["hdp"]["client-id"])
before = loaded()
try:
    client(Message(RecordDict(), dst_node_id=grid.node_ids[0], message_type="train"), grid.contexts[grid.node_ids[0]])
except Exception:
    pass  # no model or pinned plan in this message: the training stage fails after its imports
print(json.dumps({"stages": sorted(set(seen)), "summed": out is not None and len(out[1]) == 3,
                  "enrolled": enrolled, "loaded": before, "after_training": loaded()}))
"""


def test_a_node_runs_the_stages_that_do_not_train_without_torch_or_accounting():
    res = subprocess.run([sys.executable, "-c", STAGES % (HEAVY,)], capture_output=True, text=True, cwd=ROOT,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["stages"] == ["setup", "share_keys", "unmask"] and out["summed"] and out["enrolled"] == 1
    assert out["loaded"] == []
    assert "torch" in out["after_training"] and "hdp_planner_train" in out["after_training"]
