from hdp_planner_cli.app import main  # `python -m hdp_planner` as before: the CLI lives in hdp_planner_cli

main()
