"""Where the ``hdp-plan`` console script pointed before issue 18 (an install made then runs ``hdp_planner.cli:main``):
the CLI lives in :mod:`hdp_planner_cli`. Nothing imports this module; re-installing (``pip install -e .``) points the
script at ``hdp_planner_cli.app:main``, after which this file can go."""

from hdp_planner_cli.app import app, main  # noqa: F401
