# Apache-2.0
"""buildx_info in-process on canned docker answers, and its refusals of bad input."""
from pathlib import Path

import pytest

from ansible_collections.smshare.kai.plugins.modules import buildx_info

from smshare_gpu_harness import load_cases, run_case

FIXTURES = Path(__file__).resolve().parents[1] / "module_utils" / "fixtures" / "buildx"


def with_fixture_texts(case):
    for call in case.get("calls", []):
        for key in ("stdout", "stderr"):
            name = call.pop(key + "_file", None)
            if name:
                call[key] = (FIXTURES / name).read_text()
    return case


@pytest.mark.parametrize("case", load_cases("buildx_info_cases.yaml"))
def test_buildx_info(case, monkeypatch, tmp_path):
    run_case(monkeypatch, buildx_info.main, with_fixture_texts(case), tmp_path,
             binaries=case.get("binaries", ["docker"]))


@pytest.mark.parametrize("builders, words", [
    (["-rm"], ["builders[0]='-rm'", "must not start with '-'"]),
    (["kai multiarch"], ["builders[0]='kai multiarch'", "must be a buildx builder name"]),
    (["kai\nmultiarch"], ["builders[0]='kai\\\\nmultiarch'", "control characters"]),
    ([""], ["builders[0]=''", "must be set"]),
    (["x" * 10 + "/y"], ["must be a buildx builder name"]),
])
def test_bad_builder_names_are_refused_before_any_call(monkeypatch, tmp_path, builders, words):
    result = run_case(monkeypatch, buildx_info.main,
                      {"args": {"builders": builders}, "calls": [],
                       "expected": {"failed": True, "failure": "bad_input", "parameter": "builders[0]"}},
                      tmp_path, binaries=["docker"])
    for word in words:
        assert word in result["msg"]
    assert "Nothing was changed" in result["msg"]
