"""What each method plans, one module per method family, each declaring its methods for :mod:`.registry`: GDPFed's
four rows and Problem 1's solver (:mod:`.gdpfed`), the baselines (:mod:`.pfa`, :mod:`.idp_fedavg`,
:mod:`.time_adaptive`, :mod:`.pooled`; added to a plan by :mod:`.baselines`), and the planners of the DP²-FedSAM
paper (:mod:`.fedsam`) and the privacy-aware selection paper (:mod:`.selection`)."""
