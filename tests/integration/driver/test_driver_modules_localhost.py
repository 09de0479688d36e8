# Apache-2.0
"""apt_negative_pins and nvidia_driver_info run for real by ansible on this
machine (a Debian host: real dpkg-query, apt-cache, systemctl), the first on a
preferences folder made per test (check mode, diff, removal, idempotence),
the second with the stand-in nvidia-smi."""
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
STANDIN_BIN = REPO / "lab" / "standin" / "bin"

BLOCKING = """# an old freeze
Package: *
Pin: origin developer.download.nvidia.com
Pin-Priority: -1

Package: libc6
Pin: release o=Debian
Pin-Priority: 900

Package: nvidia-*
Pin: release o=NVIDIA, a=stable
Pin-Priority: -10
"""


def run_module(module, args, check=False, diff=False, env=None):
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="true", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), **(env or {}))
    argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-m", "smshare.kai." + module,
            "-a", json.dumps(args), "-e", "ansible_python_interpreter=/usr/bin/python3"]
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    proc = subprocess.run(argv, cwd=REPO, env=env, text=True, capture_output=True, check=False, timeout=120)
    result = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]
    return proc.returncode, result


@pytest.fixture()
def prefs(tmp_path):
    folder = tmp_path / "preferences.d"
    folder.mkdir()
    (folder / "freeze.pref").write_text(BLOCKING)
    (folder / "only-nvidia").write_text("Package: *\nPin: release l=NVIDIA CUDA\nPin-Priority: -5\n")
    return folder


def test_negative_pins_check_diff_remove_then_nothing_to_do(prefs):
    before = {p.name: p.read_text() for p in prefs.iterdir()}
    rc, result = run_module("apt_negative_pins", {"preferences_dir": str(prefs)}, check=True, diff=True)
    assert rc == 0 and result["changed"] is True
    assert {p.name: p.read_text() for p in prefs.iterdir()} == before
    assert [(Path(p["file"]).name, p["line"]) for p in result["pins"]] == [
        ("freeze.pref", 3), ("freeze.pref", 11), ("only-nvidia", 2)]
    assert any(d["after_header"] == "(deleted)" for d in result["diff"])

    rc, result = run_module("apt_negative_pins", {"preferences_dir": str(prefs)})
    assert rc == 0 and result["changed"] is True
    assert (prefs / "freeze.pref").read_text() == "Package: libc6\nPin: release o=Debian\nPin-Priority: 900\n"
    assert not (prefs / "only-nvidia").exists()
    rc, result = run_module("apt_negative_pins", {"preferences_dir": str(prefs)})
    assert rc == 0 and result["changed"] is False and result["pins"] == []


def test_bad_input_through_ansible_is_named_and_changes_nothing(prefs):
    before = {p.name: p.read_text() for p in prefs.iterdir()}
    rc, result = run_module("apt_negative_pins", {"preferences_dir": str(prefs), "origins": ["a\nb"]})
    assert rc != 0 and result["failure"] == "bad_input" and result["parameter"] == "origins[0]"
    assert "MODULE FAILURE" not in result["msg"] and "control characters" in result["msg"]
    assert {p.name: p.read_text() for p in prefs.iterdir()} == before


def test_driver_info_on_this_debian_host_with_the_standin_driver(tmp_path):
    root = tmp_path / "root"
    driver = {"version": "615.71.09", "branch": 615, "cuda_version": "13.4", "open": True}
    for path in ("usr/share/nvidia-standin/driver.json", "run/nvidia-standin/loaded.json"):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(json.dumps(driver))
    env = {"NVIDIA_STANDIN_ROOT": str(root), "PATH": "%s:%s" % (STANDIN_BIN, os.environ["PATH"])}
    rc, result = run_module("nvidia_driver_info", {"packages": ["bash", "nvidia-driver-open"]}, env=env)
    assert rc == 0 and result["changed"] is False, result
    assert result["driver"]["state"] == "ok" and result["driver"]["branch"] == 615
    assert result["apt"]["bash"]["installed"] and result["apt"]["bash"]["candidate"]
    assert result["apt"]["nvidia-driver-open"] == {"installed": None, "candidate": None, "versions": []}
    assert result["installed"]["bash"] == result["apt"]["bash"]["installed"]["version"]
    assert set(result["services"]) == {"nvidia-fabricmanager", "nvidia-persistenced"}
    # Upgraded but not rebooted: a state, not a failure.
    (root / "run/nvidia-standin/loaded.json").write_text(json.dumps(dict(driver, version="580.95.05")))
    rc, result = run_module("nvidia_driver_info", {"packages": []}, env=env)
    assert rc == 0 and result["driver"]["state"] == "mismatch" and result["driver"]["library_version"] == "615.71"
