"""The simulator: the run scaffold (:mod:`.scaffold`), the dispatcher and FedAvg-family loop (:mod:`.trainer`), the
personal (:mod:`.personal`) and client-selection (:mod:`.private_selection`) families, and grids of runs
(:mod:`.compare`). Datasets, models and local training live in :mod:`hdp_planner_train.learning`."""
