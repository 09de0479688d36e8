# Apache-2.0
"""nvidia_driver_state (the nvidia_driver role's one-call host reader) run for real with
ansible on localhost, against a preferences folder made for each test: which
entries count as blocking NVIDIA, and their removal in check mode, diff mode
and for real (idempotent)."""
import json
import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]

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
HARMLESS = """Package: *
Pin: origin developer.download.nvidia.com
Pin-Priority: 600

Package: *
Pin: origin deb.example.com
Pin-Priority: -1
"""


def run_module(args, check=False, diff=False):
    env = dict(os.environ, ANSIBLE_LOAD_CALLBACK_PLUGINS="true", ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
               ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    argv = ["ansible", "localhost", "-i", "localhost,", "-c", "local", "-m", "smshare.kai.nvidia_driver_state",
            "-a", json.dumps(args), "-e", "ansible_python_interpreter=%s" % "/usr/bin/python3"]
    argv += ["--check"] if check else []
    argv += ["--diff"] if diff else []
    proc = subprocess.run(argv, cwd=REPO, env=env, text=True, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]["localhost"]


@pytest.fixture()
def apt_dir(tmp_path):
    prefs = tmp_path / "preferences.d"
    prefs.mkdir()
    (prefs / "freeze.pref").write_text(BLOCKING)
    (prefs / "only-nvidia").write_text("Package: *\nPin: release l=NVIDIA CUDA\nPin-Priority: -5\n")
    (prefs / "ok.pref").write_text(HARMLESS)
    # apt ignores names with other extensions: so does the module.
    (prefs / "ignored.list").write_text(BLOCKING)
    (tmp_path / "preferences").write_text("Package: *\nPin: origin mirror.example.com\nPin-Priority: -1\n")
    return tmp_path


def found(result):
    return sorted((Path(p["file"]).name, p["line"], p["priority"]) for p in result["negative_pins"])


def test_reports_blocking_entries_with_file_and_line(apt_dir):
    result = run_module({"preferences_dir": str(apt_dir / "preferences.d"), "query_driver": False})
    assert result["changed"] is False
    assert found(result) == [("freeze.pref", 3, -1), ("freeze.pref", 11, -10), ("only-nvidia", 2, -5)]
    # A mirror counts once it is named as NVIDIA's origin.
    mirror = run_module({"preferences_dir": str(apt_dir / "preferences.d"), "query_driver": False,
                         "nvidia_origins": ["developer.download.nvidia.com", "mirror.example.com"]})
    assert ("preferences", 2, -1) in found(mirror)


def test_check_mode_removal_changes_nothing_and_shows_diff(apt_dir):
    before = {p.name: p.read_text() for p in (apt_dir / "preferences.d").iterdir()}
    result = run_module({"preferences_dir": str(apt_dir / "preferences.d"), "query_driver": False,
                         "remove_negative_pins": True}, check=True, diff=True)
    assert result["changed"] is True
    assert {p.name: p.read_text() for p in (apt_dir / "preferences.d").iterdir()} == before
    diffs = {d["before_header"]: d for d in result["diff"]}
    freeze = diffs[str(apt_dir / "preferences.d" / "freeze.pref")]
    assert "o=NVIDIA" in freeze["before"] and "o=NVIDIA" not in freeze["after"]
    assert diffs[str(apt_dir / "preferences.d" / "only-nvidia")]["after_header"] == "(deleted)"


def test_removal_keeps_other_entries_and_is_idempotent(apt_dir):
    prefs = apt_dir / "preferences.d"
    result = run_module({"preferences_dir": str(prefs), "query_driver": False,
                         "remove_negative_pins": True})
    assert result["changed"] is True
    assert result["negative_pins"] == []
    text = (prefs / "freeze.pref").read_text()
    assert "Pin: release o=Debian" in text
    assert "developer.download.nvidia.com" not in text and "o=NVIDIA" not in text
    assert not (prefs / "only-nvidia").exists()
    assert (prefs / "ok.pref").read_text() == HARMLESS
    assert (prefs / "ignored.list").read_text() == BLOCKING
    again = run_module({"preferences_dir": str(prefs), "query_driver": False,
                        "remove_negative_pins": True})
    assert again["changed"] is False
