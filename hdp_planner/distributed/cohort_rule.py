"""The public rule that draws the cohorts, and the seed the server cannot grind.

**The seed** comes from the clients, by commitment and reveal (Blum's coin flipping, "Coin flipping by telephone",
1981; SHA-256 as the commitment): at enrolment each client draws 32 bytes r_i from the OS's CSPRNG and sends only
its commitment c_i = SHA-256(r_i) (:func:`commitment`); once the list of every client's commitment is closed, each
client that finds its own c_i in it reveals r_i, and the seed is SHA-256 over every (client, r_i) in order of client
id (:func:`cohort_seed`). A client that has revealed once for a plan never commits again for it: a server that does
not like the seed cannot start over, and a colluder that withholds its reveal stalls the run rather than steering
it. While the list is open nobody but client i knows r_i, so the seed is uniform given everything the server fixed
before it (who is enrolled, in which group, who colludes).

**The rule** is a keyed permutation of each group's enrolled clients, a rotation through it round by round: the
group's clients in order of HMAC-SHA256(seed, group ‖ client id) (:func:`cohort_order`), and round r's cohort the
m positions from (r − 1)·m on, wrapping around (:func:`rule_cohort`). Every client can recompute it, so the server
names no one; each client is in at most ⌈T·m/|G|⌉ cohorts of T rounds (the cap K it also enforces). Given a uniform
seed, the cohorts a client is in hold, besides it, a uniformly random set of m − 1 of its group's other clients, so
the colluders among them follow the hypergeometric law of the group's colluders
(:func:`~hdp_planner.distributed.cohort_colluders.colluder_tail`).
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

REVEAL_BYTES = 32
"""The length of a client's secret contribution r_i."""


def fresh_reveal() -> bytes:
    """A client's secret contribution r_i: 32 bytes from the OS's CSPRNG."""
    return os.urandom(REVEAL_BYTES)


def commitment(reveal: bytes) -> str:
    """c_i = SHA-256(r_i), hexadecimal: what a client sends at enrolment."""
    if len(reveal) != REVEAL_BYTES:
        raise ValueError(f"a reveal has {REVEAL_BYTES} bytes, got {len(reveal)}")
    return hashlib.sha256(reveal).hexdigest()


def cohort_seed(reveals: Mapping[str, bytes], commitments: Mapping[str, str]) -> bytes:
    """The seed of the cohorts: SHA-256 over every client's id and r_i, in order of client id, once every r_i opens
    its commitment. Raises ValueError naming a client whose reveal is missing or does not open its commitment."""
    if set(reveals) != set(commitments):
        missing = sorted(set(commitments) ^ set(reveals))
        raise ValueError(f"the reveals and the commitments name different clients (e.g. {missing[0]})")
    h = hashlib.sha256(b"hdp-planner cohort seed")
    for client in sorted(commitments):
        if commitment(reveals[client]) != commitments[client]:
            raise ValueError(f"client {client}'s reveal does not open its commitment")
        name = client.encode()
        h.update(len(name).to_bytes(4, "big") + name + reveals[client])
    return h.digest()


def cohort_order(seed: bytes, *, group: int, clients: Sequence[str]) -> list[str]:
    """The group's clients in the seed's order: by HMAC-SHA256(seed, group ‖ client id)."""

    def key(client: str) -> bytes:
        return hmac.new(seed, f"{group}\x00{client}".encode(), hashlib.sha256).digest()

    if len(set(clients)) != len(clients):
        raise ValueError("a client is enrolled twice")
    return sorted(clients, key=key)


def rule_cohort(order: Sequence[str], *, cohort: int, rnd: int) -> list[str]:
    """Round ``rnd``'s cohort (rounds from 1): the ``cohort`` clients at positions (rnd − 1)·m … rnd·m − 1 of
    ``order``, wrapping around, in order of client id."""
    if not 1 <= cohort <= len(order) or rnd < 1:
        raise ValueError(f"a cohort of {cohort} of {len(order)} clients in round {rnd}")
    start = (rnd - 1) * cohort
    return sorted(order[(start + j) % len(order)] for j in range(cohort))


@dataclass(frozen=True, kw_only=True)
class CohortRule:
    """The cohorts of a run as every client recomputes them: the ``seed`` (:func:`cohort_seed`), each group's
    registered clients ``groups`` (ids, in any order) and each group's cohort size ``cohorts`` m."""

    seed: bytes
    groups: tuple[tuple[str, ...], ...]
    cohorts: tuple[int, ...]

    @functools.cached_property
    def orders(self) -> tuple[list[str], ...]:
        """Each group's clients in the seed's order (:func:`cohort_order`), computed once."""
        return tuple(cohort_order(self.seed, group=g, clients=c) for g, c in enumerate(self.groups))

    def cohort(self, *, group: int, rnd: int) -> list[str]:
        """Group ``group``'s cohort in round ``rnd`` (from 1), in order of client id."""
        return rule_cohort(self.orders[group], cohort=self.cohorts[group], rnd=rnd)

    def run_refusal(self, *, group: int, rnd: int, members: Iterable[str]) -> str | None:
        """Why a member refuses round ``rnd``'s run of group ``group`` whose members are ``members`` (the identities
        its secure aggregation shows), in one line; None if they are exactly the cohort the rule draws. A run with a
        member the rule did not draw (a cohort stacked with the server's own clients, or a run that mixes in another
        group's) or without one it drew is refused."""
        drawn, shown = set(self.cohort(group=group, rnd=rnd)), set(members)
        if shown == drawn:
            return None
        extra, missing = sorted(shown - drawn), sorted(drawn - shown)
        what = f"client {extra[0]}, whom the rule did not draw" if extra else f"no client {missing[0]}, whom it drew"
        return (f"the run of group {group + 1} in round {rnd} holds {len(shown)} clients with {what} (the cohort "
                f"rule's has {len(drawn)})")  # fmt: skip

    def refusal(self, *, client: str, group: int, rnd: int, members: Iterable[str]) -> str | None:
        """Why ``client`` refuses that run: it is not registered in ``group``, the rule does not draw it in the
        round's cohort, or the run's members are not exactly that cohort (:meth:`run_refusal`); None: it joins."""
        if not 0 <= group < len(self.groups) or client not in self.groups[group]:
            return f"client {client} is not registered in group {group + 1}"
        if client not in self.cohort(group=group, rnd=rnd):
            return f"the cohort rule does not draw client {client} in group {group + 1}'s cohort of round {rnd}"
        return self.run_refusal(group=group, rnd=rnd, members=members)
