"""Mutation testing of the privacy core: how many small faults planted in the accountant, the distributed
mechanism, the ledger and the plan files the tests catch (mutmut 3).

mutmut copies the code into a working folder, plants every mutant it can (an operator, a constant, a string, an
argument, a keyword swapped or dropped) inside the functions of one package, records which tests reach each function,
and for each mutant runs those tests: the mutant is killed when one fails or it times out, and survives when they all
pass. Each package runs against the tests chosen for it below (its own unit and property tests, without the
end-to-end runs that only repeat what they check, so a campaign fits in CPU minutes), one package after the other.
A survivor that cannot change behaviour is *equivalent*; :data:`EQUIVALENT` lists each with the reason, and the
score is given with and without them. mutmut is not a dependency of the project and is never installed here::

    python -m venv --system-site-packages ~/venvs/mutmut && ~/venvs/mutmut/bin/pip install mutmut==3.8.1  # once
    PYTHONPATH=. nice -n 10 ~/venvs/mutmut/bin/python benchmarks/mutation.py [--packages ledger,planfile]
        [--workdir DIR] [--max-children 2] [--sample N [--seed S]] [--fail-under 90] [--record]

``--workdir`` keeps mutmut's folders (one per package) for ``mutmut show NAME`` or ``mutmut browse`` there, and a
second run in the same folder re-tests only the functions that changed. ``--sample N`` tests a uniform sample of N
mutants per package and gives each score with its 95% Wilson interval (all four packages tested whole take hours of
CPU on two cores).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hdp_planner.report.results import Result, Table, render_result, write_result  # noqa: E402

MUTMUT = "3.8.1"
"""The mutmut release these campaigns were written for (its command line and its statuses)."""


@dataclass(frozen=True, kw_only=True)
class Campaign:
    """What mutmut mutates (one package of ``hdp_planner``) and the tests it runs against it."""

    package: str
    tests: tuple[str, ...]
    deselect: tuple[str, ...] = ()
    """Tests of those files left out: end-to-end runs (training, other processes, a database server) that take
    seconds each and check through the trainer what the selected tests check directly (a test that runs the code in
    another process never sees a mutant)."""


CAMPAIGNS: tuple[Campaign, ...] = (
    Campaign(
        package="accounting",
        tests=(
            "tests/core/test_accounting.py",
            "tests/core/test_accounting_validation.py",
            "tests/core/test_accounting_search.py",
            "tests/core/test_accountant_conformance.py",
            "tests/core/test_calibration_edges.py",
            "tests/core/test_calibration_search.py",
            "tests/core/test_rdp.py",
            "tests/core/test_pld.py",
            "tests/core/test_schedule.py",
            "tests/core/test_distributed_accounting.py",
        ),
        deselect=("tests/core/test_calibration_edges.py::test_degenerate_cases_run_fast_under_a_memory_cap",),
    ),
    Campaign(
        package="distributed",
        tests=(
            "tests/core/test_distributed_accounting.py",
            "tests/core/test_distributed_law.py",
            "tests/core/test_distributed_mechanism.py",
            "tests/core/test_distributed_plan.py",
            "tests/core/test_distributed_sampler.py",
            "tests/core/test_neighbours.py",
            "tests/core/test_cohorts.py",
            "tests/core/test_planfile_trust.py",
            "tests/core/test_planfile_hidden.py",
            "tests/core/test_coins.py",
            "tests/core/test_cohort_rule.py",
        ),
    ),
    Campaign(
        package="ledger",
        tests=(
            "tests/core/test_ledger.py",
            "tests/core/test_ledger_accountants.py",
            "tests/core/test_ledger_chain.py",
            "tests/core/test_ledger_pricing.py",
            "tests/core/test_ledger_costs.py",
            "tests/core/test_ledger_anchor.py",
            "tests/core/test_ledger_state.py",
        ),
        deselect=(
            "tests/core/test_ledger.py::test_postgresql_ledger",
            "tests/core/test_ledger.py::test_postgresql_two_runs_at_once_never_overspend",
            "tests/core/test_ledger.py::test_two_runs_at_once_never_overspend",
            "tests/core/test_ledger.py::test_a_run_killed_mid_round_keeps_its_reservation",
            "tests/core/test_ledger.py::test_train_charges_the_ledger_and_ledger_show_reports_each_client",
            "tests/core/test_ledger.py::test_compare_charges_every_run_to_the_same_clients",
            "tests/core/test_ledger.py::test_a_run_stops_before_releasing_an_uncharged_round",
            "tests/core/test_ledger_accountants.py::test_a_pld_plan_trains_with_the_ledger",
        ),
    ),
    Campaign(
        package="planfile",
        tests=(
            "tests/core/test_planfile.py",
            "tests/core/test_plan.py",
            "tests/core/test_baselines.py",
            "tests/core/test_distributed_plan.py",
            "tests/core/test_client_binding.py",
            "tests/core/test_methods.py",
            "tests/core/test_planfile_fields.py",
            "tests/core/test_planfile_hidden.py",
            "tests/core/test_planfile_trust.py",
        ),
        deselect=(
            "tests/core/test_plan.py::test_rdp_sigmas_are_what_pld_saves_over_rdp",
            "tests/core/test_client_binding.py::test_a_plan_made_from_budgets_trains_only_with_its_groups_file",
            "tests/core/test_client_binding.py::test_a_node_refuses_a_budgets_plan_without_its_groups_file",
            "tests/core/test_methods.py::test_the_trainer_audit_and_flower_read_the_registry",
            "tests/core/test_methods.py::test_the_trainers_options_follow_the_declared_traits",
        ),
    ),
)


@dataclass(frozen=True, kw_only=True)
class Equivalent:
    """A mutant that cannot change behaviour: in ``function`` of ``path``, the line ``before`` made ``after``."""

    path: str
    function: str
    before: str
    after: str
    reason: str


EQUIVALENT: tuple[Equivalent, ...] = ()
"""Every survivor judged equivalent, with the reason (matched on its file, function and changed line)."""

TIMEOUT_CONSTANT = 300
"""Seconds added to a mutant's tests' measured time before mutmut scales it (15x) into the wall-clock limit after which
the mutant counts as caught (about 75 minutes): generous, so that slow tests on a loaded machine, under ``nice``, are
never passed off as caught mutants. An endless loop still ends there, having used a share of one core."""
ORDER_PLUGIN = "fastest_first"
ORDER_PLUGIN_SOURCE = '''"""A mutant's tests fastest first, by the durations mutmut measured."""

import json
import math
from pathlib import Path


def pytest_collection_modifyitems(items):
    """Each file's tests together (its fixtures are built once), the files in order of their tests' total time."""
    stats = Path("mutmut-stats.json")
    if stats.is_file():
        durations = json.loads(stats.read_text())["duration_by_test"]
        time = {item: durations.get(item.nodeid, math.inf) for item in items}
        files = {}
        for item in items:
            files[item.path] = files.get(item.path, 0.0) + time[item]
        items.sort(key=lambda item: (files[item.path], str(item.path), time[item]))
'''
"""A pytest plugin the campaigns load: mutmut names a mutant's tests in no particular order, and stops at the first
that fails, so running the fastest first catches most mutants in a fraction of the time (a file's tests stay together,
so that its fixtures are built once per mutant)."""
KILLED = ("killed", "timeout")
"""The statuses of a caught mutant (a mutant that never ends is caught by its time limit)."""
STATUS = re.compile(r"^\s+(?P<key>\S+): (?P<status>.+)$")
GENERATE = (
    "import os; from mutmut.__main__ import copy_also_copy_files, copy_src_dir, create_mutants, "
    "set_mutant_under_test, setup_source_paths, store_lines_covered_by_tests; "
    "set_mutant_under_test('mutant_generation'); os.makedirs('mutants', exist_ok=True); copy_src_dir(); "
    "copy_also_copy_files(); setup_source_paths(); store_lines_covered_by_tests(); create_mutants({children})"
)
"""mutmut's own first step (the steps its ``run`` takes before testing), alone: every mutant written and listed,
none tested, so that a sample of them can be named to ``mutmut run``."""


@dataclass(frozen=True, kw_only=True)
class Survivor:
    key: str
    status: str
    path: str
    function: str
    before: str
    after: str

    def equivalent(self) -> Equivalent | None:
        for e in EQUIVALENT:
            if (e.path, e.function, e.before, e.after) == (self.path, self.function, self.before, self.after):
                return e
        return None


@dataclass(frozen=True, kw_only=True)
class Outcome:
    campaign: Campaign
    counts: dict[str, int]
    survivors: tuple[Survivor, ...]
    cpu_s: float
    wall_s: float
    load: tuple[float, float]
    population: int
    """Mutants planted in the package; ``total`` of them were tested (all, or a uniform sample)."""

    @property
    def total(self) -> int:
        return sum(n for status, n in self.counts.items() if status != "skipped")

    @property
    def killed(self) -> int:
        return sum(self.counts.get(s, 0) for s in KILLED)

    @property
    def equivalent(self) -> int:
        return sum(1 for s in self.survivors if s.equivalent() is not None)

    def score(self) -> tuple[float, float, float]:
        """killed / (tested − equivalent) and its 95% Wilson interval (a sample's score estimates the package's;
        the interval is [score, score] when every mutant was tested)."""
        n, k = max(self.total - self.equivalent, 1), self.killed
        p = k / n
        if self.total == self.population:
            return p, p, p
        z = 1.959963984540054
        centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
        return p, centre - half / (1 + z * z / n), centre + half / (1 + z * z / n)


def mutmut_command() -> list[str]:
    """How to start mutmut's command line in this interpreter, or exit 2 with how to install it."""
    if importlib.util.find_spec("mutmut") is None:
        print(
            "mutmut is not installed in this Python. Once, outside the repository:\n"
            f"    python -m venv --system-site-packages ~/venvs/mutmut && ~/venvs/mutmut/bin/pip install "
            f"mutmut=={MUTMUT}\nthen run this script with ~/venvs/mutmut/bin/python.",
            file=sys.stderr,
        )
        raise SystemExit(2)
    if version("mutmut") != MUTMUT:
        print(f"note: mutmut {version('mutmut')}, the campaigns were written for {MUTMUT}", file=sys.stderr)
    return [sys.executable, "-c", "import sys; from mutmut.__main__ import cli; sys.exit(cli())"]


def prepare(folder: Path, campaign: Campaign) -> None:
    """The package's working folder: the code and tests as they are now, and mutmut's and pytest's settings."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("hdp_planner", "tests", "examples"):
        shutil.rmtree(folder / name, ignore_errors=True)
        shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__", ".hypothesis"))
    (folder / "plugins").mkdir(exist_ok=True)  # not the folder itself: mutmut takes it off the tests' path
    (folder / "plugins" / f"{ORDER_PLUGIN}.py").write_text(ORDER_PLUGIN_SOURCE)
    deselect = [f"--deselect={t}" for t in campaign.deselect]
    args = ["-p", "no:xdist", "-p", "no:cacheprovider", "-p", ORDER_PLUGIN, "-m", "not slow", *deselect]
    (folder / "pyproject.toml").write_text(
        "[tool.mutmut]\n"
        'source_paths = ["hdp_planner"]\n'
        f'only_mutate = ["hdp_planner/{campaign.package}/*"]\n'
        f"pytest_add_cli_args = {json.dumps(args)}\n"
        f"pytest_add_cli_args_test_selection = {json.dumps(campaign.tests)}\n"
        'also_copy = ["examples"]\n'
        "use_git_change_detection = false\n"
        'process_isolation = "forkserver"\n'
        f"timeout_constant = {TIMEOUT_CONSTANT}\n\n"
        "[tool.pytest.ini_options]\n"
        'markers = ["slow: longer checks"]\n'
    )


def changed_lines(diff: str) -> tuple[str, str]:
    """The removed and the added lines of a mutant's diff, stripped and joined."""
    lines = diff.splitlines()
    before = [x[1:].strip() for x in lines if x.startswith("-") and not x.startswith("---")]
    after = [x[1:].strip() for x in lines if x.startswith("+") and not x.startswith("+++")]
    return " / ".join(before), " / ".join(after)


def function_of(key: str) -> str:
    """``hdp_planner.ledger.store.xǁLedgerǁrelease__mutmut_3`` → ``Ledger.release``; ``x_compose__mutmut_1`` →
    ``compose``."""
    name = key.rsplit(".", 1)[1].rsplit("__mutmut_", 1)[0]
    return ".".join(p for p in name.split("ǁ")[1:] if p) if name.startswith("xǁ") else name[2:]


def listing(folder: Path, command: list[str], env: dict[str, str]) -> dict[str, str]:
    """Every mutant of the folder and its status (``not checked`` until tested)."""
    out = subprocess.run([*command, "results", "--all", "true"], cwd=folder, env=env, capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return {m["key"]: m["status"] for m in map(STATUS.match, out.splitlines()) if m}


def run_campaign(folder: Path, campaign: Campaign, command: list[str], max_children: int, *, sample: int | None,
                 seed: int) -> Outcome:  # fmt: skip
    """Plant the package's mutants and test them all, or a uniform sample of ``sample`` of them drawn with ``seed``."""
    prepare(folder, campaign)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(ROOT), str(folder / "plugins"))), "MPLBACKEND": "Agg"}
    env.pop("HYPOTHESIS_PROFILE", None)  # the repeatable examples
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = os.getloadavg()[0]
    start = time.monotonic()
    chosen: list[str] = []
    with open(folder / "mutmut.log", "w") as log:
        if sample is not None:
            subprocess.run([command[0], "-c", GENERATE.format(children=max_children)], cwd=folder, env=env,
                           stdout=log, stderr=subprocess.STDOUT, check=True)  # fmt: skip
            planted = sorted(listing(folder, command, env))
            chosen = random.Random(seed).sample(planted, min(sample, len(planted)))
        subprocess.run([*command, "run", "--max-children", str(max_children), *chosen], cwd=folder, env=env,
                       stdout=log, stderr=subprocess.STDOUT, check=True)  # fmt: skip
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    statuses = listing(folder, command, env)
    counts: dict[str, int] = {}
    survivors = []
    for key in chosen or statuses:
        status = statuses[key]
        counts[status] = counts.get(status, 0) + 1
        if status not in KILLED and status != "skipped":
            diff = subprocess.run([*command, "show", key], cwd=folder, env=env, capture_output=True, text=True,
                                  check=True).stdout  # fmt: skip
            path = next((x[4:].strip() for x in diff.splitlines() if x.startswith("--- ")), "?")
            before_line, after_line = changed_lines(diff)
            survivors.append(Survivor(key=key, status=status, path=path, function=function_of(key),
                                      before=before_line, after=after_line))  # fmt: skip
    return Outcome(campaign=campaign, counts=counts, survivors=tuple(survivors), cpu_s=cpu, wall_s=wall,
                   load=(load, os.getloadavg()[0]), population=len(statuses))  # fmt: skip


def interval(score: tuple[float, float, float]) -> str:
    p, low, high = (100 * x for x in score)
    return f"{p:.1f}%" if low == high else f"{p:.1f}% [{low:.1f}, {high:.1f}]"


def report(outcomes: list[Outcome], max_children: int, *, seed: int) -> Result:
    sampled = any(o.total < o.population for o in outcomes)
    scores = Table(
        caption=f"Mutants per package, killed by the package's tests (mutmut {version('mutmut')}, "
        f"{max_children} workers); the score is killed / tested, and killed / (tested − equivalent)"
        + (f" with its 95% Wilson interval: the mutants tested are a uniform sample (seed {seed}) of those planted"
           if sampled else ""),
        columns=("package", "mutants planted", "tested", "killed", "of which timed out", "survived",
                 "no test reaches it", "equivalent", "score", "score, equivalent set aside", "CPU min", "wall min",
                 "load average"),
        rows=tuple((f"hdp_planner/{o.campaign.package}", str(o.population), str(o.total), str(o.killed),
                    str(o.counts.get("timeout", 0)), str(o.counts.get("survived", 0)),
                    str(o.counts.get("no tests", 0)), str(o.equivalent), f"{100 * o.killed / max(o.total, 1):.1f}%",
                    interval(o.score()), f"{o.cpu_s / 60:.1f}", f"{o.wall_s / 60:.1f}",
                    f"{o.load[0]:.1f} → {o.load[1]:.1f}")
                   for o in outcomes),
    )  # fmt: skip
    equivalent = Table(
        caption="Survivors judged equivalent: the change cannot alter what the code returns, raises or writes",
        columns=("function", "line", "mutated to", "why it cannot change behaviour"),
        rows=tuple((f"{s.path}: {s.function}", f"`{s.before}`", f"`{s.after}`", e.reason)
                   for o in outcomes for s in o.survivors if (e := s.equivalent()) is not None),
    )  # fmt: skip
    others = Table(
        caption="Other survivors: faults no selected test catches yet",
        columns=("function", "line", "mutated to", "status"),
        rows=tuple((f"{s.path}: {s.function}", f"`{s.before}`", f"`{s.after}`", s.status)
                   for o in outcomes for s in o.survivors if s.equivalent() is None),
    )  # fmt: skip
    tests = tuple(f"{c.package}: {', '.join(Path(t).name for t in c.tests)}"
                  + (f" (without {len(c.deselect)} end-to-end tests)" if c.deselect else "")
                  for c in (o.campaign for o in outcomes))  # fmt: skip
    return Result(
        name="mutation",
        title="Mutation testing of the privacy core",
        tables=(scores, equivalent, others),
        notes=("Tests run per package: " + "; ".join(tests) + ".",),
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--packages", default=",".join(c.package for c in CAMPAIGNS),
                    help="comma-separated packages of hdp_planner (default: all four)")  # fmt: skip
    ap.add_argument("--workdir", type=Path, help="keep mutmut's folders here (default: a temporary folder)")
    ap.add_argument("--max-children", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--sample", type=int, help="test a uniform sample of N mutants per package (default: all)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    ap.add_argument("--fail-under", type=float, help="exit 1 if a package's score (equivalent set aside) is lower")
    ap.add_argument("--record", action="store_true", help="write benchmarks/results/mutation.json (all four only)")
    a = ap.parse_args()
    by_name = {c.package: c for c in CAMPAIGNS}
    names = [x.strip() for x in a.packages.split(",") if x.strip()]
    unknown = [x for x in names if x not in by_name]
    if unknown or not names:
        ap.error(f"--packages: choose among {', '.join(by_name)}, got {a.packages!r}")
    if a.sample is not None and a.sample < 1:
        ap.error(f"--sample: a number of mutants of at least 1, got {a.sample}")
    if a.record and sorted(names) != sorted(by_name):
        ap.error("--record records a whole campaign: all four packages")
    command = mutmut_command()
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="mutation-"))
    outcomes = []
    try:
        for name in names:
            print(f"{name}: mutmut running (load average {os.getloadavg()[0]:.1f}) …", flush=True)
            outcome = run_campaign(workdir / name, by_name[name], command, a.max_children, sample=a.sample, seed=a.seed)
            print(f"{name}: {outcome.killed}/{outcome.total} killed ({outcome.population} planted), "
                  f"{outcome.equivalent} equivalent, "
                  f"{outcome.cpu_s / 60:.1f} CPU min", flush=True)  # fmt: skip
            outcomes.append(outcome)
    finally:
        if a.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    result = report(outcomes, a.max_children, seed=a.seed)
    print(render_result(result))
    if a.record:
        print(f"written to {write_result(result)}")
    if a.fail_under is not None:
        low = [o.campaign.package for o in outcomes if 100 * o.score()[0] < a.fail_under]
        if low:
            print(f"below {a.fail_under:g}%: {', '.join(low)}", file=sys.stderr)
            raise SystemExit(1)


if __name__ == "__main__":
    main()
