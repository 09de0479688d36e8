# Apache-2.0
"""smshare.kai.apt_negative_pins in-process on a preferences folder made per
test: what counts, check mode, diff, removal, idempotence, bad input and a
failed write, each leaving the files as they must be."""
import os

import pytest

from ansible_collections.smshare.kai.plugins.modules import apt_negative_pins

from smshare_gpu_harness import run_case

FREEZE = """# an old freeze
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

Package: cuda-toolkit-*
Pin: origin developer.download.nvidia.com
Pin-Priority: -1
"""


@pytest.fixture()
def prefs(tmp_path):
    folder = tmp_path / "preferences.d"
    folder.mkdir()
    (folder / "freeze.pref").write_text(FREEZE)
    (folder / "only-nvidia").write_text("Package: *\nPin: release l=NVIDIA CUDA\nPin-Priority: -5\n")
    (folder / "harmless.pref").write_text(HARMLESS)
    (folder / "ignored.list").write_text(FREEZE)   # apt ignores this name: so does the module
    os.chmod(str(folder / "freeze.pref"), 0o640)
    return folder


def snapshot(folder):
    return dict((p.name, (p.read_text(), p.stat().st_mode)) for p in sorted(folder.iterdir()))


def run(monkeypatch, tmp_path, args, expected, check=False, diff=False):
    case = {"args": args, "expected": expected, "check_mode": check, "diff": diff}
    return run_case(monkeypatch, apt_negative_pins.main, case, tmp_path, binaries=[])


def test_check_mode_finds_and_keeps(prefs, monkeypatch, tmp_path):
    before = snapshot(prefs)
    result = run(monkeypatch, tmp_path, {"preferences_dir": str(prefs)}, {"changed": True}, check=True, diff=True)
    assert snapshot(prefs) == before
    assert sorted((os.path.basename(p["file"]), p["line"], p["priority"]) for p in result["pins"]) == [
        ("freeze.pref", 3, -1), ("freeze.pref", 11, -10), ("only-nvidia", 2, -5)]
    diffs = dict((d["before_header"], d) for d in result["diff"])
    freeze = diffs[str(prefs / "freeze.pref")]
    assert "o=NVIDIA" in freeze["before"] and "o=NVIDIA" not in freeze["after"]
    assert "Pin: release o=Debian" in freeze["after"]
    assert diffs[str(prefs / "only-nvidia")]["after_header"] == "(deleted)"
    assert str(prefs / "harmless.pref") not in diffs


def test_removes_only_the_blocking_records_keeping_mode_then_changes_nothing(prefs, monkeypatch, tmp_path):
    result = run(monkeypatch, tmp_path, {"preferences_dir": str(prefs)}, {"changed": True})
    assert result["deleted_files"] == [str(prefs / "only-nvidia")]
    text = (prefs / "freeze.pref").read_text()
    # The comment inside the removed record went with it.
    assert text == "Package: libc6\nPin: release o=Debian\nPin-Priority: 900\n"
    assert (prefs / "freeze.pref").stat().st_mode & 0o777 == 0o640
    assert (prefs / "harmless.pref").read_text() == HARMLESS
    assert (prefs / "ignored.list").read_text() == FREEZE
    again = run(monkeypatch, tmp_path, {"preferences_dir": str(prefs)}, {"changed": False, "pins": []})
    assert again["deleted_files"] == []


def test_a_mirror_counts_once_named(prefs, monkeypatch, tmp_path):
    (prefs.parent / "preferences").write_text("Package: *\nPin: origin mirror.example.com\nPin-Priority: -1\n")
    result = run(monkeypatch, tmp_path, {"preferences_dir": str(prefs)}, {"changed": True}, check=True)
    assert "mirror.example.com" not in str(result["pins"])
    result = run(monkeypatch, tmp_path, {"preferences_dir": str(prefs),
                                         "origins": ["developer.download.nvidia.com", "mirror.example.com"]},
                 {"changed": True}, check=True)
    assert {"file": str(prefs.parent / "preferences"), "line": 2, "pin": "Pin: origin mirror.example.com",
            "package": "*", "priority": -1} in result["pins"]


def test_a_failed_write_is_named(prefs, monkeypatch, tmp_path):
    def refuse(path):
        raise OSError(30, "Read-only file system")
    monkeypatch.setattr(apt_negative_pins.os, "remove", refuse)
    result = run(monkeypatch, tmp_path, {"preferences_dir": str(prefs)},
                 {"failed": True, "failure": "write_failed"})
    assert "Read-only file system" in result["msg"]


BAD = [
    ({"origins": []}, "origins", ["at least 1 item"]),
    ({"origins": ["developer.download.nvidia.com\nPin-Priority: 1"]}, "origins[0]", ["control characters"]),
    ({"origins": ["https://developer.download.nvidia.com/"]}, "origins[0]", ["host name"]),
    ({"origins": ["-x"]}, "origins[0]", ["host name"]),
    ({"release_origins": ["NVIDIA\x1b[0m"]}, "release_origins[0]", ["control characters"]),
    ({"packages": []}, "packages", ["at least 1 item"]),
    ({"packages": ["nvidia driver"]}, "packages[0]", ["package name"]),
    ({"packages": ["nvidia-*\n"]}, "packages[0]", ["control characters"]),
    ({"preferences_dir": "etc/apt/preferences.d"}, "preferences_dir", ["absolute path"]),
    ({"preferences_dir": "/etc/apt/../apt/preferences.d"}, "preferences_dir", ["normalised"]),
    ({"preferences_dir": "/etc/apt//preferences.d"}, "preferences_dir", ["normalised"]),
    ({"preferences_dir": "/etc/apt/preferences.d\n"}, "preferences_dir", ["control characters"]),
]


@pytest.mark.parametrize("args, parameter, words", BAD, ids=[
    "no_origin", "origin_newline", "origin_url", "origin_dash", "release_origin_escape", "no_package",
    "package_space", "package_newline", "dir_relative", "dir_dotdot", "dir_double_slash", "dir_newline"])
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_bad_input_is_refused_and_nothing_changes(args, parameter, words, check, prefs, monkeypatch, tmp_path):
    before = snapshot(prefs)
    args = dict({"preferences_dir": str(prefs)}, **args)
    result = run(monkeypatch, tmp_path, args, {"failed": True, "failure": "bad_input", "parameter": parameter},
                 check=check)
    assert snapshot(prefs) == before
    assert result["msg"].startswith(parameter + "=") and result["msg"].endswith("Nothing was changed.")
    assert "For example:" in result["msg"]
    for word in words:
        assert word in result["msg"]
