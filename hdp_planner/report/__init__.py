"""Studies over plans and their figures: sweeps over one parameter (:mod:`.sweep`) and figures (:mod:`.plots`,
matplotlib, imported when a figure is drawn)."""
