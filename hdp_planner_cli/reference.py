"""The ``hdp-plan`` app as a click command, for the documentation's generated command-line reference."""

from __future__ import annotations

import typer

from hdp_planner_cli.app import app

command = typer.main.get_command(app)
