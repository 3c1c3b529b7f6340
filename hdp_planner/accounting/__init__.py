"""The accountant: ε ↔ σ for Poisson-subsampled Gaussian rounds (RDP :mod:`.rdp`, PLD :mod:`.pld`, the distributed
discrete Gaussian :mod:`.ddg`, one protocol and registry :mod:`.accountants`), the
calibrations every plan row uses (:mod:`.calibration`, Theorem 1's closed form beside them) and σ schedules
(:mod:`.schedule`), all found by one search (:mod:`.search`). Imports nothing else of the project."""
