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


@pytest.mark.parametrize("builders, parameter, words", [
    ([{"name": "-rm"}], "builders[0].name", ["builders[0].name='-rm'", "must not start with '-'"]),
    ([{"name": "kai multiarch"}], "builders[0].name", ["'kai multiarch'", "must be a buildx builder name"]),
    ([{"name": "kai\nmultiarch"}], "builders[0].name", ["builders[0].name='kai", "control characters"]),
    ([{"name": "x/y"}], "builders[0].name", ["must be a buildx builder name"]),
    ([{"platforms": ["amd64"]}], "builders[0].platforms[0]", ["'amd64'", "os/arch[/variant]"]),
    ([{"platforms": ["linux/arm64\n"]}], "builders[0].platforms[0]", ["control characters"]),
    ([{}, {"name": "k", "platforms": ["Linux/AMD64"]}], "builders[1].platforms[0]", ["os/arch[/variant]"]),
])
def test_bad_input_is_refused_before_any_call(monkeypatch, tmp_path, builders, parameter, words):
    result = run_case(monkeypatch, buildx_info.main,
                      {"args": {"builders": builders}, "calls": [],
                       "expected": {"failed": True, "failure": "bad_input", "parameter": parameter}},
                      tmp_path, binaries=["docker"])
    for word in words:
        assert word in result["msg"]
    assert "Nothing was changed" in result["msg"]
