"""``hdp-plan``, the command-line layer over :mod:`hdp_planner`'s API (:mod:`.app`: the typer app and ``main``).

:mod:`.options` holds the option types and parsers every command shares, :mod:`.console` the consoles and the
one-line errors; one module per command group: :mod:`.plan` (solve, verify), :mod:`.budgets` (sweep, plot,
assign), :mod:`.selection` (select, fedsam-noise), :mod:`.train` (train, compare), :mod:`.flower` (flower).
"""
