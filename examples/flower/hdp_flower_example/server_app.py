"""ServerApp: hdp_planner_flower's strategy for the plan named in the run config (``[tool.flwr.app.config]``)."""

from hdp_planner_flower.simulation import run_config_server_app

app = run_config_server_app()
