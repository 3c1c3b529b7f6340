"""Each package's ``__init__`` exports its real API: every name in ``__all__`` resolves, the names a user needs are
there, and the optional packages still import without torch or flwr."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

FACES = {
    "hdp_planner": {
        "plan",
        "solve_plan",
        "Plan",
        "PlanConfig",
        "load_plan",
        "save_plan",
        "verify",
        "plan_problems",
        "PlanVerificationError",
        "accountant_names",
        "get_accountant",
        "register_accountant",
        "PrivacyAccountant",
        "METHOD_REGISTRY",
        "Method",
        "Ledger",
        "LedgerError",
    },
    "hdp_planner_train": {
        "train",
        "TrainResult",
        "TrainError",
        "run_rounds",
        "GroupAggregator",
        "CanaryAuditor",
        "RunPlan",
        "BoundRun",
    },
    "hdp_planner_flower": {
        "HdpStrategy",
        "client_app",
        "hdp_mod",
        "share_mod",
        "run_flower",
        "FlowerConfig",
        "DeployConfig",
        "deploy_local",
        "LocalDeployment",
    },
}
NEEDS = {"hdp_planner": None, "hdp_planner_train": "torch", "hdp_planner_flower": "flwr"}


@pytest.mark.parametrize("package", sorted(FACES))
def test_exports_resolve(package):
    if NEEDS[package]:
        pytest.importorskip(NEEDS[package])
    module = importlib.import_module(package)
    assert FACES[package] <= set(module.__all__), FACES[package] - set(module.__all__)
    missing = [name for name in module.__all__ if getattr(module, name, None) is None]
    assert missing == []
    names = ", ".join(module.__all__)
    exec(f"from {package} import {names}", {})  # the form a notebook uses, lazy names included


def test_train_raises_the_exported_error(tmp_path):
    """``train`` raises the ``TrainError`` the face exports (one class, not a copy) for a setting it refuses, and
    ``PlanFileError`` for a plan file it cannot read."""
    pytest.importorskip("torch")
    import hdp_planner
    import hdp_planner_train

    with pytest.raises(hdp_planner_train.TrainError, match="--dataset"):
        hdp_planner_train.train(tmp_path / "missing.json", method="gdpfed+", dataset="nope")
    with pytest.raises(hdp_planner_train.TrainError, match="unknown training option"):
        hdp_planner_train.train(tmp_path / "missing.json", method="gdpfed+", dataset="digits", nope=1)
    with pytest.raises(hdp_planner.PlanFileError, match="not found"):
        hdp_planner_train.train(tmp_path / "missing.json", method="gdpfed+", dataset="digits")


def test_lazy_names_are_their_modules_objects():
    """A lazily loaded name is the object of the module that defines it, and an unknown name an AttributeError."""
    from hdp_planner.io.lazy import lazy_getattr

    getter = lazy_getattr("pkg", {"dumps": "json"})
    assert getter("dumps") is importlib.import_module("json").dumps
    with pytest.raises(AttributeError, match="module 'pkg' has no attribute 'loads'"):
        getter("loads")


@pytest.mark.parametrize("package", ["hdp_planner_train", "hdp_planner_flower"])
def test_import_is_light(package):
    """The faces load torch and flwr only when a name that needs them is asked for."""
    code = f"import sys, {package}; print(sorted(m for m in ('torch', 'flwr') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_unknown_name_is_an_attribute_error():
    module = importlib.import_module("hdp_planner_train")
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        _ = module.nothing


def test_registered_method_is_visible_through_the_face():
    """``METHOD_REGISTRY`` is the registry itself, not a copy: a method registered there is planned by name."""
    import hdp_planner
    from hdp_planner.methods.registry import REGISTRY

    assert hdp_planner.METHOD_REGISTRY is REGISTRY
    assert "gdpfed+" in hdp_planner.METHOD_REGISTRY


def docstring_gaps(obj: object) -> list[str]:
    """The Google-style sections ``obj``'s docstring lacks: ``Args:`` where it takes parameters, ``Returns:`` where a
    function returns something."""
    doc = inspect.getdoc(obj) or ""
    try:
        params = inspect.signature(obj).parameters.values()
    except (TypeError, ValueError):  # a class whose constructor is a builtin's (an exception without fields)
        params = []
    named = [
        p
        for p in params
        if p.name != "self" and not (inspect.isclass(obj) and p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD))
    ]
    gaps = ["Args:"] if named and "Args:" not in doc else []
    if inspect.isfunction(obj):
        returns = inspect.signature(obj).return_annotation
        if returns not in (None, "None") and "Returns:" not in doc:
            gaps.append("Returns:")
    return gaps


@pytest.mark.parametrize("package", sorted(FACES))
def test_exported_functions_and_classes_document_their_args_and_returns(package):
    if NEEDS[package]:
        pytest.importorskip(NEEDS[package])
    module = importlib.import_module(package)
    gaps = {
        name: docstring_gaps(obj)
        for name in module.__all__
        if (inspect.isfunction(obj := getattr(module, name)) or inspect.isclass(obj))
    }
    assert {name: gap for name, gap in gaps.items() if gap} == {}


def test_the_docstring_check_finds_a_gap():
    def undocumented(x: int) -> int:
        """Twice x."""
        return 2 * x

    assert docstring_gaps(undocumented) == ["Args:", "Returns:"]
