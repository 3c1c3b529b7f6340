"""The round rules in torch, shared by the simulator and Flower: sampling, clipping, per-group noise from a
secure or seeded source, Top-k and PFA's projection, and each method's spec of them (:mod:`.aggregate`)."""
