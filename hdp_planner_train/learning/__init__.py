"""Local learning, shared by the simulator and Flower's ClientApp: datasets (:mod:`.datasets`, :mod:`.shakespeare`),
their federated partitions (:mod:`.partitions`, :mod:`.federated`), models (:mod:`.models`), a sampled client's local
training (:mod:`.engines`) and one client's record-level DP-SGD (:mod:`.dp_sgd`)."""
