"""The ServerApp of a deployment (:mod:`.deploy`): ``flwr run`` loads ``hdp_planner_flower.deployed:server`` on the
SuperLink's side (the run's settings from its run config); every SuperNode loads ``hdp_planner_flower.node:client``
(its client id, pinned plan and state folder from its node config), which imports none of this."""

from hdp_planner_flower.simulation import run_config_server_app

server = run_config_server_app()
