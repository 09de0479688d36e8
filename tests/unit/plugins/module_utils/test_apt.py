# Apache-2.0
"""module_utils/apt.py: apt-cache policy and dpkg-query parsers on recorded
output, and the preferences records that block NVIDIA's repository."""
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.smshare.kai.plugins.module_utils import apt

RECORDED = Path(__file__).resolve().parent / "recorded"


def recorded(name):
    return (RECORDED / name).read_text()


@pytest.mark.parametrize("version, upstream", [
    ("615.71.09-1", "615.71.09"), ("615.71.09-0ubuntu1", "615.71.09"), ("1:615.71.09-2", "615.71.09"),
    ("615.71.09", "615.71.09"), ("1.1-1", "1.1"), ("2.0-rc1-3", "2.0-rc1"), ("", ""), (None, ""),
])
def test_upstream_version(version, upstream):
    assert apt.upstream_version(version) == upstream


def test_policy_fresh_repository_lists_candidates_and_skips_unknown_names():
    policy = apt.parse_policy(recorded("apt-cache-policy-fresh-repository.txt"))
    assert sorted(policy) == ["libnvidia-nscq", "nvidia-driver-open", "nvidia-driver-pinning-615",
                              "nvidia-fabricmanager"]
    driver = policy["nvidia-driver-open"]
    assert driver["installed"] is None and driver["candidate"] == "615.71.09-1"
    assert [v["version"] for v in driver["versions"]] == ["615.71.09-1", "580.95.05-1"]
    fabricmanager = policy["nvidia-fabricmanager"]
    # The repack: newest Fabric Manager revision differs from the driver's.
    assert fabricmanager["candidate"] == "615.71.09-2"
    assert [v["version"] for v in fabricmanager["versions"]] == ["615.71.09-2", "615.71.09-1", "580.95.05-1"]
    assert fabricmanager["versions"][0]["sources"] == [(500, "http://10.88.0.1:19415/debian12/x86_64  Packages")]


def test_policy_negative_pin_keeps_the_old_branch():
    policy = apt.parse_policy(recorded("apt-cache-policy-580-negative-pin.txt"))
    driver = policy["nvidia-driver-open"]
    assert driver["installed"] == driver["candidate"] == "580.95.05-1"
    first, installed = driver["versions"]
    assert (first["version"], first["priority"], first["installed"]) == ("615.71.09-1", -1, False)
    assert (installed["priority"], installed["installed"]) == (1000, True)
    assert installed["sources"] == [(-10, "http://10.88.0.1:19415/debian12/x86_64  Packages"),
                                    (100, "/var/lib/dpkg/status")]


def test_policy_after_the_pin_moved_offers_615():
    policy = apt.parse_policy(recorded("apt-cache-policy-580-pinned-615.txt"))
    assert policy["nvidia-driver-open"]["installed"] == "580.95.05-1"
    assert policy["nvidia-driver-open"]["candidate"] == "615.71.09-1"
    assert policy["nvidia-fabricmanager"]["candidate"] == "615.71.09-2"


def test_policy_installed_615():
    driver = apt.parse_policy(recorded("apt-cache-policy-615-installed.txt"))["nvidia-driver-open"]
    assert driver["installed"] == "615.71.09-1"
    assert [v["installed"] for v in driver["versions"]] == [True, False]


def test_policy_older_apt_package_pin_line_and_epochs():
    text = ("nvidia-driver-open:\n  Installed: (none)\n  Candidate: 1:615.71.09-0ubuntu1\n"
            "  Package pin: 1:615.71.09-0ubuntu1\n  Version table:\n"
            "     1:615.71.09-0ubuntu1 1000\n        600 https://developer.download.nvidia.com/compute/"
            "cuda/repos/ubuntu2404/x86_64  Packages\n")
    driver = apt.parse_policy(text)["nvidia-driver-open"]
    assert driver["candidate"] == "1:615.71.09-0ubuntu1"
    assert driver["versions"][0]["priority"] == 1000


@pytest.mark.parametrize("text", [
    "  Installed: (none)\n",                            # a field before any package
    "nvidia-driver-open:\n  Installed (none)\n",         # a field without its colon
    "nvidia-driver-open:\n  Version table:\n  615.71.09-1 500\n",  # a version line out of shape
    "nvidia-driver-open:\n        500 http://x Packages\n",     # a source before any version
])
def test_policy_unknown_shape_is_an_error_not_a_guess(text):
    with pytest.raises(ValueError):
        apt.parse_policy(text)


def test_installed_keeps_only_installed_packages():
    text = ("ii \tnvidia-driver-open\t615.71.09-1\nrc \tnvidia-driver-580-open\t580.95.05-1\n"
            "un \tnvidia-fabricmanager\t\niU \tlibnvidia-nscq\t615.71.09-1\nnot a line\n")
    assert apt.parse_installed(text) == {"nvidia-driver-open": "615.71.09-1"}


def test_unfinished_names_what_dpkg_left_part_way():
    text = ("ii \tnvidia-driver-open\t615.71.09-1\niU \tlibnvidia-nscq\t615.71.09-1\n"
            "iF \tnvidia-fabricmanager\t615.71.09-2\nrc \told\t1\niHR\tbroken\t2\n"
            "iW \tnvidia-persistenced\t615.71.09-1\nit \tman-db\t2.11\nun \tnever\t\nnot a line\n")
    assert apt.parse_unfinished(text) == [
        {"package": "libnvidia-nscq", "version": "615.71.09-1", "status": "unpacked, not configured"},
        {"package": "nvidia-fabricmanager", "version": "615.71.09-2", "status": "half-configured"},
        {"package": "broken", "version": "2", "status": "half-installed, needing a reinstall"},
        {"package": "nvidia-persistenced", "version": "615.71.09-1", "status": "awaiting triggers"},
        {"package": "man-db", "version": "2.11", "status": "with triggers pending"}]


def test_dpkg_interrupted_reads_its_journal(tmp_path):
    assert apt.dpkg_interrupted(str(tmp_path / "none")) is False
    assert apt.dpkg_interrupted(str(tmp_path)) is False
    (tmp_path / "tmp.i").write_text("")
    assert apt.dpkg_interrupted(str(tmp_path)) is False
    (tmp_path / "0001").write_text("")
    assert apt.dpkg_interrupted(str(tmp_path)) is True


FREEZE = """# Keep local packages; freeze the driver.
Package: libc6
Pin: release o=Debian
Pin-Priority: 900

Package: *
Pin: release o=NVIDIA
Pin-Priority: -10

Package: nvidia-*
Pin: origin "developer.download.nvidia.com"
Pin-Priority: -1

Package: cuda-toolkit-*
Pin: origin developer.download.nvidia.com
Pin-Priority: -1

Package: /^libnvidia-nscq/
Pin: release l=NVIDIA CUDA, a=stable
Pin-Priority: -5

Package: nvidia-driver-open
Pin: origin developer.download.nvidia.com
Pin-Priority: 600
"""


def test_negative_pins_name_file_line_and_only_records_that_block_the_driver():
    found = apt.negative_pins("/etc/apt/preferences.d/freeze.pref", FREEZE,
                              ["developer.download.nvidia.com"], ["NVIDIA", "NVIDIA CUDA"],
                              ["nvidia-driver-open", "nvidia-fabricmanager", "libnvidia-nscq"])
    assert [(p["line"], p["pin"], p["priority"], p["package"]) for p in found] == [
        (7, "Pin: release o=NVIDIA", -10, "*"),
        (11, 'Pin: origin "developer.download.nvidia.com"', -1, "nvidia-*"),
        (19, "Pin: release l=NVIDIA CUDA, a=stable", -5, "/^libnvidia-nscq/"),
    ]
    assert found[0]["lines"] == [6, 8]


def test_negative_pins_of_other_origins_do_not_count():
    text = "Package: *\nPin: origin mirror.example.com\nPin-Priority: -1\n"
    args = (["developer.download.nvidia.com"], ["NVIDIA"], ["nvidia-driver-open"])
    assert apt.negative_pins("p", text, *args) == []
    assert len(apt.negative_pins("p", text, ["mirror.example.com"], ["NVIDIA"], ["nvidia-driver-open"])) == 1


def test_without_records_keeps_the_rest_and_says_whether_records_are_left():
    found = apt.negative_pins("f", FREEZE, ["developer.download.nvidia.com"], ["NVIDIA", "NVIDIA CUDA"],
                              ["nvidia-driver-open"])
    after, left = apt.without_records(FREEZE, [tuple(p["lines"]) for p in found])
    assert left
    assert "o=NVIDIA" not in after and "nvidia-*" not in after
    assert "Package: libc6" in after and "cuda-toolkit-*" in after and "\n\n\n" not in after
    only = "# comment\nPackage: *\nPin: release o=NVIDIA\nPin-Priority: -1\n"
    after, left = apt.without_records(only, [(2, 4)])
    assert not left and after == "# comment\n"


def test_preference_files_follow_apts_rules(tmp_path):
    folder = tmp_path / "preferences.d"
    folder.mkdir()
    for name in ("a.pref", "noext", "ignored.list", "bad name", "z.pref.bak", "b_c-d.pref"):
        (folder / name).write_text("")
    (folder / "dir.pref").mkdir()
    (tmp_path / "preferences").write_text("")
    assert [Path(p).name for p in apt.preference_files(str(folder))] == [
        "preferences", "a.pref", "b_c-d.pref", "noext"]
    assert apt.preference_files(str(tmp_path / "missing")) == [str(tmp_path / "preferences")]


# ---------------------------------------------------------------- the driver's versions
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "preflight_rows"
DRIVER_CASES = dict((case["name"], case) for case in yaml.safe_load(
    (FIXTURES / "driver_versions.yml").read_text())["cases"])
DRIVER_RECORDED = json.loads((FIXTURES / "recorded.json").read_text())["driver_versions"]


def choose(name):
    case = DRIVER_CASES[name]
    knobs = dict({"nvidia_driver_branch": 615, "nvidia_driver_fabricmanager": "auto", "nvidia_driver_nscq": True},
                 **(case.get("knobs") or {}))
    return apt.driver_versions(case["offer"], knobs["nvidia_driver_branch"], knobs.get("nvidia_driver_version"),
                               knobs["nvidia_driver_fabricmanager"],
                               str(knobs["nvidia_driver_nscq"]).lower() in ("true", "yes", "1"))


@pytest.mark.parametrize("name", sorted(DRIVER_CASES))
def test_driver_versions_are_what_the_role_chose(name):
    """Every recorded state: the same choice as the role's Jinja made (recorded.json)."""
    found, recorded = choose(name), DRIVER_RECORDED[name]
    assert dict((key, found[key]) for key in recorded["want"]) == recorded["want"]
    assert sorted(found["plan"]) == recorded["plan"]
    assert found["plan"] == [p for p in found["packages"] if p in found["plan"]]


# The rules, one case each: (case, driver chosen, Fabric Manager wanted, packages to install).
@pytest.mark.parametrize("name, driver, fabricmanager, plan", [
    ("fresh-pcie-node", "615.71.09-0ubuntu1", False, ["nvidia-driver-open=615.71.09-0ubuntu1"]),
    ("fresh-hgx-node-companions-newest-revision", "615.71.09-0ubuntu1", True,
     ["nvidia-driver-open=615.71.09-0ubuntu1", "nvidia-fabricmanager=615.71.09-2", "libnvidia-nscq=615.71.09-1"]),
    ("converged-hgx-node-keeps-installed-revisions", "615.71.09-0ubuntu1", True, []),
    ("installed-of-branch-is-not-upgraded-by-a-rerun", "615.71.09-0ubuntu1", False, []),
    ("other-branch-installed-moves-to-candidate", "615.71.09-0ubuntu1", True,
     ["nvidia-driver-open=615.71.09-0ubuntu1", "nvidia-fabricmanager=615.71.09-2", "libnvidia-nscq=615.71.09-1"]),
    ("pinned-version-downgrades-companions-follow", "615.71.09-0ubuntu1", True,
     ["nvidia-driver-open=615.71.09-0ubuntu1", "nvidia-fabricmanager=615.71.09-2", "libnvidia-nscq=615.71.09-1"]),
    ("pinned-version-not-offered", "", True, ["nvidia-driver-open=", "nvidia-fabricmanager=", "libnvidia-nscq="]),
    ("nothing-offered-yet-check-mode", "", False, ["nvidia-driver-open="]),
    ("candidate-of-another-branch-is-refused", "", True,
     ["nvidia-driver-open=", "nvidia-fabricmanager=580.95.05-1", "libnvidia-nscq=580.95.05-1"]),
    ("fabric-manager-always-without-nscq", "615.71.09-0ubuntu1", True,
     ["nvidia-driver-open=615.71.09-0ubuntu1", "nvidia-fabricmanager=615.71.09-2"]),
    ("fabric-manager-never-on-nvswitches", "615.71.09-0ubuntu1", False, ["nvidia-driver-open=615.71.09-0ubuntu1"]),
    ("nscq-knob-given-as-text", "615.71.09-0ubuntu1", True,
     ["nvidia-driver-open=615.71.09-0ubuntu1", "nvidia-fabricmanager=615.71.09-2"]),
    ("epoch-and-string-branch-unreadable-sysfs", "1:615.71.09-1", False, ["nvidia-driver-open=1:615.71.09-1"]),
    ("companions-not-at-the-driver-version", "615.80.01-0ubuntu1", True,
     ["nvidia-driver-open=615.80.01-0ubuntu1", "nvidia-fabricmanager=", "libnvidia-nscq="]),
    ("branch-prefix-is-a-whole-number", "61.10.01-1", False, ["nvidia-driver-open=61.10.01-1"]),
])
def test_driver_versions_rules(name, driver, fabricmanager, plan):
    found = choose(name)
    assert (found["driver"], found["fabricmanager"], found["plan"]) == (driver, fabricmanager, plan)


def test_driver_versions_of_an_empty_offer():
    assert apt.driver_versions({}, 615) == {
        "driver": "", "upstream": "", "fabricmanager": False, "fabricmanager_version": "", "nscq_version": "",
        "packages": ["nvidia-driver-open="], "plan": ["nvidia-driver-open="]}
