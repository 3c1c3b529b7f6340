"""From budgets to a plan: per-client budgets → groups (:mod:`.budgets`, :mod:`.grouping`), Problem 1
(:mod:`.problem`), the plan's rows and solver (:mod:`.plan`), and sweeps over one parameter (:mod:`.sweep`)."""
