"""hdp-planner on Flower: a plan's method as a Flower app (``flwr run``)."""
