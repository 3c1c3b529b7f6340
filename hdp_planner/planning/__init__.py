"""From budgets to a plan's rows: per-client budgets → groups (:mod:`.budgets`, :mod:`.grouping`), Problem 1
(:mod:`.problem`), and the plan's types and row helpers (:mod:`.plan`). The methods (:mod:`hdp_planner.methods`)
build the rows."""
