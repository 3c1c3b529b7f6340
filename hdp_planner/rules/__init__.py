"""The rules of one DP aggregation round (sampling, clipping, noise shares, group weights ω_m, Λ), written once for
the planner's Λ and the trainer's and Flower's updates (:mod:`.noise`)."""
