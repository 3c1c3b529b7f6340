"""The round rules in torch, shared by the simulator and Flower: each method's spec of them (:mod:`.specs`), sampling
and the round's seeds (:mod:`.sampling`), clipping (:mod:`.clipping`), per-group noise from a secure or seeded source
(:mod:`.noise_sources`), the server's release by Top-k or PFA's projection (:mod:`.release`), one aggregation round
(:mod:`.aggregate`), secure aggregation (:mod:`.secagg`) and hidden cohorts (:mod:`.cohort`)."""
