"""GDPFed's methods (Table 3): DP-FedAvg, GDPFed, GDPFed-op and GDPFed+, and p-fedavg (DP-FedAvg's rounds without
clipping or noise, the accuracy ceiling). Their rows are the ones Problem 1's solver plans together
(:func:`hdp_planner.planning.plan.solve_plan`: GDPFed+ shares GDPFed-op's q_m and σ_m), so no entry has a builder.
"""

from __future__ import annotations

from hdp_planner.methods.method import Method, RoundRules

METHODS = (
    Method("p-fedavg", "DP-FedAvg", private=False),  # trains from DP-FedAvg's row without noise
    Method("dp-fedavg", "DP-FedAvg", rules=RoundRules("plan-q"), audit=True, flower=True),  # one group of all n
    Method("gdpfed", "GDPFed", rules=RoundRules("plan-q"), audit=True, flower=True),
    Method("gdpfed-op", "GDPFed-op", rules=RoundRules("per-group-q"), audit=True, flower=True),
    Method("gdpfed+", "GDPFed+", rules=RoundRules("per-group-q", top_k=True), audit=True, flower=True),
)
