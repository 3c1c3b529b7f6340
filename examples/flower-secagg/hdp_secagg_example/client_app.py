"""ClientApp: your training function inside Flower's SecAgg+ and the share mod.

The node contributes only to the plan it pinned: node config ``plan`` and ``plan-sha256`` (``flower-supernode
--node-config "client-id=I plan=/path/plan.json plan-sha256=HEX"``) or, in this simulation, the environment of the
node's process (``HDP_PLAN``, ``HDP_PLAN_SHA256``, ``HDP_STATE_DIR``: set by ``run.sh``). Replace ``train`` with your
own: it receives the global model (``msg.content["arrays"]``) and the run's settings (``msg.content["train"]``) and
replies with the trained model under the same keys.
"""

from hdp_planner_flower.app import client_app, train  # the dataset's model and local SGD (hdp_planner_train)
from hdp_planner_flower.pin import Pin

app = client_app(train, pin=Pin.from_environment(), secagg=True)
