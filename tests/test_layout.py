"""The layout: no import circles, lower layers never import higher ones, the core starts without torch, flwr or
matplotlib, and no module is over 400 lines without saying why. Computed from the source with ``ast``, so a new
module is checked without listing it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("hdp_planner", "hdp_planner_train", "hdp_planner_flower", "hdp_planner_cli")
LAYERS = (
    "hdp_planner.io",  # atomic writes, option parsers, lazy package exports
    "hdp_planner.accounting",  # the accountant: ε ↔ σ
    "hdp_planner.rules",  # one round's rules: sampling, clipping, noise shares, weights, Λ
    "hdp_planner.distributed",  # distributed discrete noise under secure aggregation: samplers, encoding, laws
    "hdp_planner.planning",  # budgets → groups → Problem 1; the plan's types and row helpers
    "hdp_planner.methods",  # each method's rows and round rules (GDPFed's solver included); the registry
    "hdp_planner.trust",  # the trust models beside the trusted server: secure aggregation, cohorts, the registry
    "hdp_planner.planfile",  # the plan file: JSON of every section, verification of the rows
    "hdp_planner.solving",  # one call from budgets to a verified plan with its trust model's sections
    "hdp_planner.ledger",  # the privacy ledger (SQLAlchemy): budgets, runs, charges, composition per client
    "hdp_planner.audit_one_run",  # the one-run ε lower bound (Steinke, Nasr, Jagielski)
    "hdp_planner.audit",  # canary statistics (empirical ε)
    "hdp_planner.report",  # sweeps and figures (matplotlib)
    "hdp_planner",  # the public API (re-exports)
    "hdp_planner_train.rules",  # the round rules in torch (simulator and Flower)
    "hdp_planner_train.learning",  # datasets, partitions, models, local training (simulator and Flower's clients)
    "hdp_planner_train.audit",  # canaries in a run
    "hdp_planner_train.rounds",  # the round loop with hooks (simulator and Flower)
    "hdp_planner_train.run",  # a run's options, plan, trust, ledger, progress, metrics and output (simulator, Flower)
    "hdp_planner_train.simulator",  # the run scaffold, trainers, compare
    "hdp_planner_train",  # the Python API (train, TrainResult) and the install hint
    "hdp_planner_flower",  # the same rounds on Flower
    "hdp_planner_cli",  # hdp-plan: parse, call, render
)
"""Every layer, lowest first: a module may import its own layer and the layers before it, never a later one."""
ENTRY_POINTS = {"hdp_planner.__main__", "hdp_planner_cli.__main__"}
"""``python -m`` entry points: nothing imports them, they only start the CLI."""


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if name not in ENTRY_POINTS:
                found[name] = path
    return found


MODULES = _modules()


def _imports(name: str, path: Path) -> set[str]:
    """The project's modules ``name`` imports anywhere in its source (lazy imports included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:  # `from package import module` imports the module
                sub = f"{base}.{alias.name}"
                targets.add(sub if sub in MODULES else base)
    return {t for t in targets if t in MODULES and t != name}


GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def _layer(name: str) -> int:
    matches = [i for i, layer in enumerate(LAYERS) if name == layer or name.startswith(layer + ".")]
    assert matches, f"{name} is in no layer: add its package to LAYERS"
    return max(matches, key=lambda i: len(LAYERS[i]))


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph``, or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def _collapsed(level: int) -> dict[str, set[str]]:
    """The graph between packages: each module as its package ``level`` names deep (modules of the root as the
    root package)."""

    def pkg(name: str) -> str:
        path = MODULES[name]
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        return ".".join(package.split(".")[:level])

    graph: dict[str, set[str]] = {}
    for name, targets in GRAPH.items():
        graph.setdefault(pkg(name), set()).update(pkg(t) for t in targets if pkg(t) != pkg(name))
    return graph


def test_the_scan_sees_the_project():
    assert {"hdp_planner.planning.plan", "hdp_planner_cli.app", "hdp_planner_train.simulator.trainer"} <= set(MODULES)
    assert "hdp_planner.planning.plan" in GRAPH["hdp_planner_cli.plan_render"]  # `from x.y import z` is an edge to x.y


def test_no_import_circle_between_modules():
    assert _cycle(GRAPH) is None, " → ".join(_cycle(GRAPH) or ())


@pytest.mark.parametrize("level", [1, 2])
def test_no_import_circle_between_packages(level):
    graph = _collapsed(level)
    assert _cycle(graph) is None, " → ".join(_cycle(graph) or ())


def test_lower_layers_never_import_higher_ones():
    wrong = [
        f"{name} ({LAYERS[_layer(name)]}) imports {t} ({LAYERS[_layer(t)]})"
        for name, targets in GRAPH.items()
        for t in sorted(targets)
        if _layer(t) > _layer(name)
    ]
    assert not wrong, "\n".join(wrong)


SIMULATOR_RUNS = ("scaffold", "trainer", "compare", "personal", "private_selection", "checkpoint", "interrupts")
"""The simulator's own runs: Flower shares the run layer (``hdp_planner_train.run``) with them, never imports them."""


def test_flower_imports_no_simulator_run():
    wrong = [
        f"{name} imports {t}"
        for name, targets in GRAPH.items()
        if name.split(".")[0] == "hdp_planner_flower"
        for t in sorted(targets)
        if t.rpartition(".")[0] == "hdp_planner_train.simulator" and t.rpartition(".")[2] in SIMULATOR_RUNS
    ]
    assert not wrong, "\n".join(wrong)


def test_the_trust_models_are_listed_once():
    """Every layer checks a trust model against the registry of ``hdp_planner.trust.registry``, never its own list."""
    home = MODULES["hdp_planner.trust.registry"]
    lists = [
        name
        for name, path in MODULES.items()
        if path != home
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.Tuple, ast.List, ast.Set))
        and {e.value for e in node.elts if isinstance(e, ast.Constant)} >= {"server", "secagg"}
    ]
    assert not lists, ", ".join(lists)


def test_the_cycle_finder_finds_a_circle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_core_and_the_plan_commands_load_neither_torch_flwr_nor_matplotlib(tmp_path):
    code = (
        "import sys\n"
        "import hdp_planner\n"
        "heavy = ('torch', 'flwr', 'matplotlib')\n"
        "assert not [m for m in heavy if m in sys.modules], 'import hdp_planner'\n"
        "from typer.testing import CliRunner\n"
        "from hdp_planner_cli.app import app\n"
        f"plan = {str(tmp_path / 'plan.json')!r}\n"
        "r = CliRunner().invoke(app, ['solve', '--eps', '1,2', '--n', '200', '--rounds', '10', '-o', plan])\n"
        "assert r.exit_code == 0, r.output\n"
        "r = CliRunner().invoke(app, ['verify', plan])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in heavy if m in sys.modules))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "[]"


def _private_imports(source: str, package: str) -> list[str]:
    """``from module import _name`` of the project's modules outside ``package`` (the importer's own package)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PACKAGES:
            if node.module.rpartition(".")[0] != package:
                found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return [f for f in found if not f.rpartition(".")[2].startswith("__")]


def test_no_private_name_is_imported_across_packages():
    wrong = [
        f"{name} imports {target}"
        for name, path in MODULES.items()
        for target in _private_imports(
            path.read_text(), name if path.name == "__init__.py" else name.rpartition(".")[0]
        )
    ]
    assert not wrong, "\n".join(wrong)


def test_the_private_import_check_finds_one():
    source = (
        "from hdp_planner_train.simulator.trainer import TrainConfig, _hidden\nfrom hdp_planner.io import __version__"
    )
    assert _private_imports(source, "hdp_planner_flower") == ["hdp_planner_train.simulator.trainer._hidden"]
    assert _private_imports(source, "hdp_planner_train.simulator") == []


MAX_LINES = 400
WHY_LONG = "One module because"
"""A module over :data:`MAX_LINES` lines says why in its docstring, in a sentence starting with these words."""


def _long_without_reason(source: str) -> bool:
    """Whether ``source`` is over :data:`MAX_LINES` lines and its module docstring does not say why."""
    docstring = " ".join((ast.get_docstring(ast.parse(source)) or "").split())
    return len(source.splitlines()) > MAX_LINES and WHY_LONG not in docstring


def test_no_module_is_over_400_lines_without_saying_why():
    wrong = [
        f"{name}: {len(path.read_text().splitlines())} lines"
        for name, path in MODULES.items()
        if _long_without_reason(path.read_text())
    ]
    assert not wrong, f"split these modules by idea, or say why one is right ({WHY_LONG} …):\n" + "\n".join(wrong)


def test_the_length_check_finds_a_long_module():
    body = "x = 1\n" * MAX_LINES
    assert _long_without_reason('"""A module."""\n' + body)
    assert not _long_without_reason(f'"""A module.\n\n{WHY_LONG} its parts\nshare one state."""\n' + body)
    assert not _long_without_reason('"""A module."""\n' + body[: -len("x = 1\n") * 2])
