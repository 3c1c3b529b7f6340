"""A training run's building blocks, shared by the simulator, ``hdp-plan compare`` and the Flower runtime."""
