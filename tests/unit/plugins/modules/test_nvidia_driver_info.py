# Apache-2.0
"""smshare.kai.nvidia_driver_info in-process against canned tool answers
(nvidia_driver_info_cases.yaml), and its bad-input table."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import nvidia_smi
from ansible_collections.smshare.kai.plugins.modules import nvidia_driver_info

from smshare_gpu_harness import load_cases, run_case

ALL = ["nvidia-smi", "systemctl", "dpkg-query", "apt-cache"]


@pytest.fixture(autouse=True)
def fake_host(monkeypatch, tmp_path):
    """The PCI bus and the loaded module's version file live under tmp_path."""
    monkeypatch.setattr(nvidia_smi, "PCI_DEVICES", str(tmp_path / "pci"))
    monkeypatch.setattr(nvidia_smi, "KERNEL_MODULE_VERSION_FILE", str(tmp_path / "version"))


@pytest.mark.parametrize("case", load_cases("nvidia_driver_info_cases.yaml"))
def test_nvidia_driver_info(case, monkeypatch, tmp_path):
    case.setdefault("args", {})
    run_case(monkeypatch, nvidia_driver_info.main, case, tmp_path, binaries=case.get("binaries", ALL))


@pytest.mark.parametrize("packages, words", [
    (["-oDebug::pkgProblemResolver=1"], ["start with '-'"]),
    (["nvidia-driver-open\n"], ["control characters"]),
    (["nvidia driver"], ["Debian package name"]),
    (["NVIDIA-driver-open"], ["Debian package name"]),
    (["nvidia-*"], ["Debian package name"]),
    ([""], ["must be set"]),
], ids=["leading_dash", "newline", "space", "uppercase", "glob", "empty"])
def test_bad_package_names_are_refused_before_any_call(packages, words, monkeypatch, tmp_path):
    result = run_case(monkeypatch, nvidia_driver_info.main,
                      {"args": {"packages": packages}, "expected": {"failed": True, "failure": "bad_input"}},
                      tmp_path, binaries=ALL)
    assert result["parameter"] == "packages[0]"
    assert "For example: nvidia-driver-open." in result["msg"]
    for word in words:
        assert word in result["msg"]
