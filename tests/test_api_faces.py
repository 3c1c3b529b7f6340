"""Each package's ``__init__`` exports its real API: every name in ``__all__`` resolves, the names a user needs are
there, and the optional packages still import without torch or flwr."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

FACES = {
    "hdp_planner": {"plan", "verify", "load_plan", "Plan", "get_accountant", "register_accountant", "Method"},
    "hdp_planner_train": {"train", "TrainResult", "TrainError", "run_rounds", "GroupAggregator"},
    "hdp_planner_flower": {"HdpStrategy", "hdp_mod", "share_mod", "run_flower", "FlowerConfig"},
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
