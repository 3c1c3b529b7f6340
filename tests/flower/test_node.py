"""A deployed node's ClientApp loads per stage only what the stage needs: SecAgg+'s setup, share-keys and unmask
stages and the enrolment query run in a fresh process without torch and without the planner's accounting; the
training stage loads torch (which shows that the check sees an import), and, once its node has derived the pinned
plan, neither the accounting nor scikit-learn, under either trust model, while it still checks the pin."""

from __future__ import annotations

import copy
import json
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "scipy", "dp_accounting", "sqlalchemy", "sklearn", "hdp_planner.accounting", "hdp_planner_train")
"""What a stage that does not train must not import: torch, the planner's accounting and what it stands on."""
TRAINING_HEAVY = ("scipy", "dp_accounting", "sklearn", "hdp_planner.accounting")
"""What the training stage must not import once its node has derived the pinned plan (as after its first round): the
planner's accounting, what it stands on, and scikit-learn (the digits are read from its file)."""

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


TRAINING = """
import json, pickle, sys
from flwr.clientapp.client_app import LoadClientAppError
from flwr.supercore.object_ref import load_app

app = load_app("hdp_planner_flower.node:client", LoadClientAppError, ".")
answers = []
for name in sys.argv[1:]:
    with open(name, "rb") as f:
        msg, context = pickle.load(f)
    try:
        reply = app(msg, context)
        answers.append(reply.error.reason if reply.has_error() else "ok")
    except Exception as exc:
        answers.append(f"{type(exc).__name__}: {exc}")
loaded = sorted(h for h in %r if any(m == h or m.startswith(h + ".") for m in sys.modules))
print(json.dumps({"answers": answers, "loaded": loaded}))
"""


@pytest.fixture(scope="module")
def training_stages(tmp_path_factory):
    """Node 0's training-stage message and context (pickled) from one in-process round of a 12-client digits plan
    under each trust model, all clients sampled, the node's state folder holding its derivations of the plan (as
    after its first round); and one with a node config that pins another hash."""
    pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from conftest import digits_settings
    from flwr.app import Context, RecordDict
    from typer.testing import CliRunner

    from hdp_planner.planfile.document import load_plan
    from hdp_planner_cli.app import app as cli
    from hdp_planner_flower.app import model_arrays
    from hdp_planner_flower.local import InProcessGrid
    from hdp_planner_flower.node import client
    from hdp_planner_flower.node_state import client_terms, pinned_plan
    from hdp_planner_flower.pin import Pin, file_sha256
    from hdp_planner_flower.stages import TRAINING_STAGES, stage_of
    from hdp_planner_flower.strategy import HdpStrategy
    from hdp_planner_train.learning.models import make_model
    from hdp_planner_train.rules.specs import plan_spec

    folder, n = tmp_path_factory.mktemp("node"), 12
    d = sum(p.numel() for p in make_model("digits").parameters())
    files = []

    class Everyone:
        def random(self, size):
            return np.zeros(size)

    for trust in ("secagg", "server"):
        path, state = folder / f"plan-{trust}.json", folder / f"state-{trust}"
        args = ["solve", "--eps", "1,2,4", "--n", str(n), "--rounds", "5", "--q", "1.0", "--clip", "1.0",
                "--methods", "gdpfed+", "--trust", trust, "-o", str(path)]  # fmt: skip
        if trust == "secagg":
            args[-2:-2] = ["--bits", "16", "--survivors", "0.75", "--model-dim", str(d)]
        assert CliRunner().invoke(cli, args).exit_code == 0
        sha = file_sha256(path)

        def node(msg, context, trust=trust, state=state):
            trains = msg.metadata.message_type.startswith("train") and stage_of(msg) in TRAINING_STAGES
            if context.node_config["client-id"] == 0 and trains:
                files.append(folder / f"{trust}.pickle")
                files[-1].write_bytes(pickle.dumps((copy.deepcopy(msg), copy.deepcopy(context))))
                shutil.copytree(state, folder / f"{trust}.state")  # the node's state before it trains
            return client(msg, context)

        grid = InProcessGrid(node, n)
        for i, nid in enumerate(grid.node_ids):
            config = {"client-id": i, "plan": str(path), "plan-sha256": sha, "state-dir": str(state)}
            grid.contexts[nid] = Context(1, nid, config, RecordDict(), {})
        state.mkdir(mode=0o700)
        pin = Pin.from_node_config(grid.contexts[grid.node_ids[0]].node_config)
        if trust == "secagg":
            pinned_plan(pin)
        client_terms(pin, client=0, secure=trust == "secagg")  # node 0's derivations, as after its first round
        plan = load_plan(path)
        strategy = HdpStrategy(plan, plan_spec(plan, "gdpfed+"), plan_sha256=sha, uniform=Everyone())
        strategy.start(grid, model_arrays("digits", num_classes=10, seed=0), num_rounds=1,
                       train_config=digits_settings(clients=n, seed=0).record())  # fmt: skip
        shutil.rmtree(state)
        shutil.copytree(folder / f"{trust}.state", state)
    msg, context = pickle.loads(files[0].read_bytes())
    context.node_config["plan-sha256"] = "0" * 64
    files.append(folder / "other-hash.pickle")
    files[-1].write_bytes(pickle.dumps((msg, context)))
    return folder, files


def test_the_training_stage_reads_its_nodes_derivations_without_the_accounting(training_stages):
    folder, files = training_stages
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(folder), "OMP_NUM_THREADS": "1"}
    res = subprocess.run([sys.executable, "-c", TRAINING % (TRAINING_HEAVY,), *map(str, files)], capture_output=True,
                         text=True, cwd=folder, env=env, timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout.strip().splitlines()[-1])
    assert out["answers"][:2] == ["ok", "ok"] and "SHA-256" in out["answers"][2] and len(out["answers"]) == 3
    assert out["loaded"] == []
