"""ClientApp: your training function, made private by ``hdp_mod`` (clip to C_m, noise share under secagg).

Replace ``train`` with your own: it receives the global model (``msg.content["arrays"]``) and the run's settings
(``msg.content["train"]``) and replies with the trained model under the same keys; ``hdp_mod`` turns that reply
into the clipped update the server expects. ``enroll`` reports the node's client id (node config ``client-id``
in deployment, ``partition-id`` in simulation) so that the server can map it to its group.
"""

from flwr.clientapp import ClientApp

from hdp_planner_flower.app import train  # the Fashion-MNIST CNN's local SGD (hdp_planner_train)
from hdp_planner_flower.mods import hdp_mod
from hdp_planner_flower.stages import enroll

app = ClientApp()
app.train(mods=[hdp_mod])(train)
app.query("hdp_enroll")(enroll)
