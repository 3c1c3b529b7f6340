"""Which trust model a run follows: a trusted server, or secure aggregation (the plan's, unless asked otherwise)."""

from __future__ import annotations

from hdp_planner.distributed.trust import TRUST_KINDS, TrustKind
from hdp_planner_train.rules.specs import GroupSpec
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.settings import RunSettings


def run_trust(cfg: RunSettings, spec: GroupSpec, planned: TrustKind, *, source: str) -> TrustKind:
    """The trust model the run follows: ``cfg.trust.kind``, by default the one ``planned`` for the plan named
    ``source`` (a method without noise runs as the trusted-server reference). ``--trust server`` on a plan solved for
    secure aggregation would show the server every clipped update it was planned never to see: refused unless
    ``cfg.trust.override``."""
    if cfg.trust.kind is not None and cfg.trust.kind not in TRUST_KINDS:
        raise TrainError(f"--trust must be {' or '.join(TRUST_KINDS)}, got {cfg.trust.kind!r}")
    if cfg.trust.kind is None:
        return planned if spec.private else "server"
    if cfg.trust.kind == "server" and planned == "secagg" and spec.private and not cfg.trust.override:
        raise TrainError(
            f"{source} was solved for a server that is not trusted (--trust secagg): --trust server would "
            "show the server every clipped update; add --override-trust to run it so"
        )
    return cfg.trust.kind
