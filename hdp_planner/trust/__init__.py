"""The trust models beside the trusted server (:class:`~hdp_planner.planning.trust.TrustedServer`): secure
aggregation (:mod:`.secagg`) and secure aggregation with cohorts (:mod:`.cohorts`), and the registry that names them
(:mod:`.registry`)."""
