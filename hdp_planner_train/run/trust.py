"""Which trust model a run follows: the plan's, unless the run asks for another (by its name, ``--trust``)."""

from __future__ import annotations

from hdp_planner.planning.plan import Trust
from hdp_planner.planning.trust import SecaggParameters, TrustedServer
from hdp_planner.trust.registry import trust_class, trust_name, trust_names
from hdp_planner_train.run.errors import TrainError
from hdp_planner_train.run.settings import RunSettings


def run_trust(cfg: RunSettings, private: bool, planned: Trust, *, source: str) -> Trust:
    """The trust model the run follows: ``cfg.trust.kind``, by default the one ``planned`` for the plan named
    ``source`` (a method without noise, not ``private``, runs as the trusted-server reference). A model that shows
    the server the clipped updates, on a plan solved for one that does not, would show the server every update it
    was planned never to see: refused unless ``cfg.trust.override``. A model that adds its own sections to the plan
    needs a plan solved for it."""
    requested = cfg.trust.kind
    if requested is None:
        return planned if private else TrustedServer()
    try:
        cls = trust_class(requested)
    except ValueError:
        raise TrainError(f"--trust must be {' or '.join(trust_names())}, got {requested!r}") from None
    if isinstance(planned, cls):  # type: ignore[arg-type]
        return planned
    if not cls.sees_updates:
        raise TrainError(f"--trust {requested} needs a plan solved with --trust {requested}; {source} was solved for "
                         f"--trust {trust_name(planned)}")  # fmt: skip
    if private and not planned.sees_updates and not cfg.trust.override:
        raise TrainError(
            f"{source} was solved for a server that is not trusted (--trust {trust_name(planned)}): --trust "
            f"{requested} would show the server every clipped update; add --override-trust to run it so"
        )
    return cls.requested(planned.parameters or SecaggParameters())
