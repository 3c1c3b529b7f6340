"""What each method plans: the baselines' rows (:mod:`.baselines`, HDP-Pooled in :mod:`.pooled`), and the planners
of papers 002 (:mod:`.fedsam`) and 003 (:mod:`.selection`)."""
