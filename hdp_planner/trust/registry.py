"""The trust models by name: the one place where ``--trust`` and a plan file's ``"kind"`` are read and written.

``server``: a trusted server (:class:`~hdp_planner.planning.trust.TrustedServer`); ``secagg``: secure aggregation with
distributed discrete Gaussian noise (:class:`~hdp_planner.trust.secagg.SecureAggregation`), with public cohorts where
who contributes is hidden (:class:`~hdp_planner.trust.cohorts.Cohorts`, the same name in a plan file, which records
the cohorts beside it). A new trust model is one class implementing :class:`~hdp_planner.planning.plan.Trust` and one
entry here.
"""

from __future__ import annotations

from typing import Protocol

from hdp_planner.planning.plan import Trust
from hdp_planner.planning.trust import CohortCaps, SecaggParameters, TrustedServer
from hdp_planner.trust.cohorts import Cohorts
from hdp_planner.trust.secagg import SecureAggregation


class TrustClass(Protocol):
    """A trust model's class: it makes the model a run or a plan asks for."""

    sees_updates: bool

    def requested(self, parameters: SecaggParameters) -> Trust: ...


TRUSTS: dict[str, TrustClass] = {"server": TrustedServer, "secagg": SecureAggregation}  # type: ignore[dict-item]
"""Every trust model by name, the default first."""
DEFAULT_TRUST = next(iter(TRUSTS))
"""The name of the trust model a plan is solved for unless asked otherwise: a trusted server."""
HIDING = {"secagg": Cohorts}
"""The trust models that can hide who contributes from the server, by name: their form with public cohorts."""


def trust_names() -> tuple[str, ...]:
    """The names ``--trust`` takes."""
    return tuple(TRUSTS)


def trust_class(name: str) -> TrustClass:
    """The trust model called ``name`` (ValueError, one line, for an unknown name)."""
    if name not in TRUSTS:
        raise ValueError(f"trust must be one of {', '.join(TRUSTS)}, got {name!r}")
    return TRUSTS[name]


def trust_name(trust: Trust) -> str:
    """The name of ``trust``'s model (cohorts are secure aggregation's: ``secagg``)."""
    return next(name for name, cls in TRUSTS.items() if isinstance(trust, cls))  # type: ignore[arg-type]


def requested_trust(name: str, parameters: SecaggParameters, caps: CohortCaps | None = None) -> Trust:
    """The trust model ``name`` with ``parameters`` and, with ``caps``, public cohorts hiding who contributes, its
    sections not yet planned (ValueError, one line, for a model that cannot take them)."""
    trust = trust_class(name).requested(parameters)
    if caps is None:
        return trust
    if name not in HIDING:
        raise ValueError(f"--hide-sample needs --trust {' or '.join(HIDING)} (cohorts send masked vectors through "
                         "secure aggregation)")  # fmt: skip
    return HIDING[name](parameters=parameters, caps=caps)
