"""tests/conftest.py's lab fixture: a session never shrinks a lab another live session uses."""
import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location("smshare_tests_conftest", Path(__file__).resolve().parents[2] / "conftest.py")
fixture_module = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(fixture_module)


@pytest.mark.parametrize("args, facts, kept", [
    (["up", "--fleet"], {"gpu_nodes": ["a", "b", "c", "d", "e"], "fleet": True}, ["up", "--fleet", "--gpu-nodes", "5"]),
    (["up", "--gpu-nodes", "3"], {"gpu_nodes": ["a"] * 5}, ["up", "--gpu-nodes", "5"]),
    (["up", "--nodes", "--gpu-nodes", "5"], {"gpu_nodes": ["a"] * 2, "node_tier": True},
     ["up", "--nodes", "--gpu-nodes", "5"]),
    (["up"], {"gpu_nodes": ["a"] * 4}, ["up", "--gpu-nodes", "4"]),
    (["up"], {"gpu_nodes": ["a", "b"]}, ["up"]),
])
def test_what_the_running_lab_has_is_kept(args, facts, kept, monkeypatch):
    monkeypatch.delenv("SMSHARE_LAB_GPU_NODES", raising=False)
    assert fixture_module._keeping(args, facts) == kept
