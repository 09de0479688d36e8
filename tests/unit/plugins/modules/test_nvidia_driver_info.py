# Apache-2.0
"""smshare.kai.nvidia_driver_info in-process against canned tool answers
(nvidia_driver_info_cases.yaml), and its bad-input table."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import apt
from ansible_collections.smshare.kai.plugins.module_utils import nvidia_smi
from ansible_collections.smshare.kai.plugins.modules import nvidia_driver_info

from smshare_gpu_harness import load_cases, run_case

ALL = ["nvidia-smi", "systemctl", "dpkg-query", "apt-cache"]


@pytest.fixture(autouse=True)
def fake_host(monkeypatch, tmp_path):
    """The PCI bus, the loaded module's version file and dpkg's journal live under tmp_path."""
    monkeypatch.setattr(nvidia_smi, "PCI_DEVICES", str(tmp_path / "pci"))
    monkeypatch.setattr(apt, "DPKG_UPDATES_DIR", str(tmp_path / "dpkg-updates"))
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


def test_preferences_and_files_are_read_without_apt_or_nvidia_smi(monkeypatch, tmp_path):
    """The plan's part of the read: negative pins in the preferences folder (and the
    single file beside it), each path's state; no tool runs, no file's text returned."""
    prefs = tmp_path / "apt" / "preferences.d"
    prefs.mkdir(parents=True)
    (prefs / "freeze-nvidia.pref").write_text("Package: *\nPin: origin mirror.example.com\nPin-Priority: -10\n")
    (tmp_path / "apt" / "preferences").write_text("Package: nvidia-*\nPin: release o=NVIDIA\nPin-Priority: -1\n")
    (prefs / "other.pref").write_text("Package: *\nPin: origin deb.debian.org\nPin-Priority: -10\n")
    monkeypatch.setattr(nvidia_driver_info, "PREFERENCES_DIR", str(prefs))
    login = tmp_path / "login.conf"
    login.write_text("machine m login u password hunter2\n")
    result = run_case(monkeypatch, nvidia_driver_info.main, {
        "args": {"gather": ["preferences", "files"], "pin_origins": ["mirror.example.com"],
                 "paths": [str(login), str(tmp_path / "absent")]},
        "expected": {"changed": False}}, tmp_path, binaries=[])
    assert [(pin["file"].split("/")[-1], pin["priority"]) for pin in result["negative_pins"]] == \
        [("preferences", -1), ("freeze-nvidia.pref", -10)]
    assert result["files"][str(tmp_path / "absent")] == {"exists": False}
    assert result["files"][str(login)]["type"] == "file" and "hunter2" not in str(result)
    assert "installed" not in result and "driver" not in result


@pytest.mark.parametrize("args, parameter, words", [
    ({"gather": ["preferences"], "pin_origins": ["mirror example.com"]}, "pin_origins[0]", "host name"),
    ({"gather": ["preferences"], "pin_origins": []}, "pin_origins", "at least"),
    ({"gather": ["files"], "paths": ["etc/apt/auth.conf"]}, "paths[0]", "absolute path"),
    ({"gather": ["files"], "paths": ["/etc/apt/\nauth.conf"]}, "paths[0]", "control characters"),
], ids=["origin_with_space", "no_origin", "relative_path", "newline_in_path"])
def test_bad_plan_inputs_are_refused_before_any_read(args, parameter, words, monkeypatch, tmp_path):
    result = run_case(monkeypatch, nvidia_driver_info.main,
                      {"args": args, "expected": {"failed": True, "failure": "bad_input"}}, tmp_path, binaries=[])
    assert result["parameter"] == parameter and words in result["msg"], result["msg"]


def test_the_host_facts_and_a_folder_read_whole(monkeypatch, tmp_path):
    """The role's one read: the host facts it needs (no setup run) with the running kernel's
    build tree among the files, and every entry of a folder named in dirs (its entries'
    names depend on those facts); a folder that does not exist is not listed."""
    sources = tmp_path / "sources.list.d"
    sources.mkdir()
    (sources / "cuda-debian12-x86-64.sources").write_text("Types: deb\nURIs: http://mirror/\n")
    (sources / "other.list").write_text("deb http://deb.debian.org/debian bookworm main\n")
    result = run_case(monkeypatch, nvidia_driver_info.main, {
        "args": {"gather": ["files", "host"], "dirs": [str(sources), str(tmp_path / "absent")]},
        "expected": {"changed": False}}, tmp_path, binaries=[])
    host = result["host"]
    assert set(host) == {"distribution", "distribution_version", "distribution_major_version", "architecture",
                         "kernel", "virtualization_type", "virtualization_role"}
    assert "/lib/modules/%s/build" % host["kernel"] in result["files"]
    assert result["listed_dirs"] == [str(sources)]
    assert result["files"][str(sources / "cuda-debian12-x86-64.sources")]["paragraphs"] == [
        {"Types": "deb", "URIs": "http://mirror/"}]
    assert result["files"][str(sources / "other.list")]["type"] == "file"


def test_a_relative_folder_is_refused(monkeypatch, tmp_path):
    result = run_case(monkeypatch, nvidia_driver_info.main, {
        "args": {"gather": ["files"], "dirs": ["etc/apt"]}, "expected": {"failed": True, "failure": "bad_input"}},
        tmp_path, binaries=[])
    assert result["parameter"] == "dirs[0]"
