"""The simulator: datasets (:mod:`.data`), models (:mod:`.models`), local training (:mod:`.engines`), the run
scaffold (:mod:`.scaffold`), the dispatcher and FedAvg-family loop (:mod:`.trainer`), the personal (:mod:`.personal`)
and client-selection (:mod:`.private_selection`) families, and grids of runs (:mod:`.compare`)."""
