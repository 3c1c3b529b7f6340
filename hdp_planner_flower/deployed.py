"""The apps of a deployment (:mod:`.deploy`): ``flwr run`` loads ``hdp_planner_flower.deployed:server`` on the
SuperLink's side (the run's settings from its run config) and ``hdp_planner_flower.deployed:client`` on every
SuperNode (its client id, pinned plan and state folder from its node config)."""

from hdp_planner_flower.app import deployed_client_app
from hdp_planner_flower.simulation import run_config_server_app

server = run_config_server_app()
client = deployed_client_app()
