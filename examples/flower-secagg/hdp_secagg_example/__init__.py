"""hdp-planner on Flower with secure aggregation: a plan's method as a Flower app (``flwr run``)."""
