"""ServerApp: hdp_planner_flower's strategy for the plan in the run config, every group's round through SecAgg+."""

from hdp_planner_flower.simulation import run_config_server_app

app = run_config_server_app()
