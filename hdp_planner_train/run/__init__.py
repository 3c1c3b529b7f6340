"""The run layer the simulator and Flower share: a run's errors and settings (:mod:`.errors`, :mod:`.settings`), its
noise source (:mod:`.noise`), trust model (:mod:`.trust`), privacy ledger (:mod:`.ledger`), progress
(:mod:`.progress`), metrics (:mod:`.metrics`) and output folder (:mod:`.output`, :mod:`.plots`)."""
