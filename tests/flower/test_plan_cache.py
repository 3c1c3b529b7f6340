"""A node derives what it reads off its pinned plan once and keeps it in its state folder: the same values as a fresh
derivation, read back by a later process without deriving, keyed by the plan's hash (a changed file is refused or
derived anew), owner-only, and never anything but the cached types."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")
pytest.importorskip("torch")

from conftest import pin_for, solve_secure

from hdp_planner_flower import node_state
from hdp_planner_flower.pin import RoundRefused, file_sha256, load_pinned, pinned_spec
from hdp_planner_flower.plan_cache import decode, encode

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def secure_plan(tmp_path_factory):
    return solve_secure(tmp_path_factory.mktemp("cache"), eps="1,2,4", n=24, q=1.0, model_dim=2410)


def clear() -> None:
    for fn in (node_state.pinned_plan, node_state.client_terms, load_pinned, pinned_spec, node_state.run_epsilon):
        fn.cache_clear()


def same(a, b) -> bool:
    """Equal frozen dataclasses, arrays compared element by element."""
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if hasattr(a, "__dataclass_fields__"):
        return type(a) is type(b) and all(same(getattr(a, f), getattr(b, f)) for f in a.__dataclass_fields__)
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return bool(a == b)  # numpy scalars come back as Python numbers of the same value


def test_what_a_node_keeps_is_what_it_derives(secure_plan, tmp_path):
    clear()
    pin = pin_for(secure_plan, tmp_path)
    fresh = load_pinned(pin)
    kept = decode(json.loads(json.dumps(encode(fresh))))
    assert same(fresh, kept) and kept.secagg.laws[0].encoding == fresh.secagg.laws[0].encoding
    terms = node_state.derive_terms(pin, client=3, secure=True)
    assert decode(json.loads(json.dumps(encode(terms)))) == terms


def test_a_later_process_reads_the_derivation_without_deriving(secure_plan, tmp_path, monkeypatch):
    clear()
    pin = pin_for(secure_plan, tmp_path)
    first, terms = node_state.pinned_plan(pin), node_state.client_terms(pin, client=5, secure=True)
    clear()

    def fail(*args, **kwargs):
        raise AssertionError("derived again")

    monkeypatch.setattr(node_state, "load_pinned", fail)
    monkeypatch.setattr(node_state, "derive_terms", fail)
    assert same(node_state.pinned_plan(pin), first) and node_state.client_terms(pin, client=5, secure=True) == terms
    cache = tmp_path / "derived.sqlite"
    assert stat.S_IMODE(cache.stat().st_mode) == 0o600 and stat.S_IMODE(tmp_path.stat().st_mode) == 0o700
    code = (  # a new process, as a SuperNode starts one per message: the cache's value, not a derivation
        "import sys\n"
        "from conftest import pin_for\n"
        "from hdp_planner_flower import node_state\n"
        "node_state.load_pinned = node_state.derive_terms = None\n"
        f"pin = pin_for({str(secure_plan)!r}, {str(tmp_path)!r})\n"
        "print(node_state.pinned_plan(pin).group_of_client.tolist(), node_state.client_terms(pin, client=5, "
        "secure=True).cap)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split("] ")[1].strip() == str(terms.cap)


def test_a_changed_plan_is_refused_or_derived_anew(secure_plan, tmp_path):
    clear()
    copy = tmp_path / "plan.json"
    copy.write_bytes(secure_plan.read_bytes())
    pin = pin_for(copy, tmp_path / "state")
    node_state.pinned_plan(pin)
    clear()
    copy.write_text(copy.read_text().replace('"rounds": 6', '"rounds": 5', 1))
    with pytest.raises(RoundRefused, match="SHA-256"):
        node_state.pinned_plan(pin)  # the pin names the old hash: the cached derivation is not used
    with pytest.raises(RoundRefused, match="fails verification"):
        node_state.pinned_plan(pin_for(copy, tmp_path / "state"))  # the new file is derived anew, and fails
    assert file_sha256(copy) != pin.sha256


def test_a_missing_groups_file_is_refused_before_the_cache_is_read(secure_plan, tmp_path):
    clear()
    pin = pin_for(secure_plan, tmp_path)
    node_state.pinned_plan(pin)
    clear()
    with pytest.raises(RoundRefused, match="groups file"):
        node_state.pinned_plan(type(pin)(**{**pin.__dict__, "groups": str(tmp_path / "none.csv")}))


def test_the_cache_builds_only_its_own_types():
    with pytest.raises(ValueError, match="not a cached type"):
        decode({"type": "subprocess:Popen", "fields": {"args": "true"}})
    with pytest.raises(ValueError, match="not a cached type"):
        decode({"type": "hdp_planner_flower.deploy:LocalDeployment", "fields": {}})  # not a frozen dataclass
    with pytest.raises(TypeError):
        encode(object())
