"""Privacy of the distributed discrete Gaussian sum against each adversary: third parties, who see only released
models, and the server, which draws the sample. The bounds and their theorems are in
:mod:`hdp_planner.accounting.ddg`, beside the other accountants (it is registered as ``ddg``); they are named here
for the code of secure aggregation."""

from hdp_planner.accounting.ddg import (
    ORDERS,
    amplified_release_rdp,
    calibrate_noise_multiplier,
    epsilon_from_rdp,
    epsilon_of,
    epsilon_server,
    epsilon_third_parties,
    poisson_subsampled_rdp,
    release_rdp,
    tau,
)

__all__ = [
    "ORDERS",
    "amplified_release_rdp",
    "calibrate_noise_multiplier",
    "epsilon_from_rdp",
    "epsilon_of",
    "epsilon_server",
    "epsilon_third_parties",
    "poisson_subsampled_rdp",
    "release_rdp",
    "tau",
]
