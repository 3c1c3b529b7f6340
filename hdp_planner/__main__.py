from hdp_planner.cli import main

main()
