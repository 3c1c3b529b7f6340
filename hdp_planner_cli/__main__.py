from hdp_planner_cli.app import main

main()
