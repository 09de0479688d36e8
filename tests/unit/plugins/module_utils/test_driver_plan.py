# Apache-2.0
"""module_utils/driver_plan.py: the nvidia_driver role's steps from one read.

Recorded reads (fixtures/driver_plan/, nvidia_driver_info with every gather):
converged-580.json, a lab GPU node the role converged on branch 580 (the stand-in
mirror at 10.88.0.1:18615, Fabric Manager for its six NVSwitches); fresh.json, a
node container before the role (no repository, nothing installed). Each drift
case changes one thing of the converged read, as the lab and Molecule tests do
on the node; the wanted state is built from the role's own vars/main.yml."""
import copy
import hashlib
import json
from pathlib import Path

import pytest
import yaml

from ansible_collections.smshare.kai.plugins.module_utils import apt, driver_plan
from ansible_collections.smshare.kai.plugins.filter.nvidia_driver_plan import nvidia_driver_plan
from ansible.errors import AnsibleFilterError

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[3]
ROLE_VARS = yaml.safe_load((REPO / "roles" / "nvidia_driver" / "vars" / "main.yml").read_text())
SOURCES = "/etc/apt/sources.list.d/cuda-debian12-x86-64.sources"
BLACKLIST = ROLE_VARS["_nvidia_driver_blacklist_file"]
AUTH = ROLE_VARS["_nvidia_driver_auth_file"]
KEYRING_LIST = "/etc/apt/sources.list.d/cuda-debian12-x86_64.list"


def recorded(name):
    return json.loads((HERE / "fixtures" / "driver_plan" / name).read_text())


BUILD = next(path for path in recorded("converged-580.json")["files"] if path.endswith("/build"))


def wanted(state, branch=580, version=None, fabricmanager="auto", persistenced=True, auth_sha256=None,
           blacklist=True, headers=True):
    return {
        "branch": branch, "pin_package": "nvidia-driver-pinning-%d" % branch,
        "keyring_list": KEYRING_LIST, "auth_file": AUTH, "auth_sha256": auth_sha256,
        "sources_file": SOURCES,
        "sources_fields": {"X-Repolib-Name": "cuda-debian12-x86_64", "Types": "deb",
                           "URIs": "http://10.88.0.1:18615/debian12/x86_64/", "Suites": "/",
                           "Signed-By": "/usr/share/keyrings/cuda-archive-keyring.gpg"},
        "blacklist_file": BLACKLIST,
        "blacklist_sha256": hashlib.sha256(ROLE_VARS["_nvidia_driver_blacklist_content"].encode()).hexdigest()
        if blacklist else None,
        "kernel_build": BUILD if headers else None,
        "versions": apt.driver_versions(state, branch, version, fabricmanager, True),
        "persistenced": persistenced, "fabricmanager": fabricmanager,
    }


def converged():
    return recorded("converged-580.json")


def drift(change):
    state = converged()
    change(state)
    return state


def set_file(path, **values):
    return lambda state: state["files"][path].update(values)


def uninstall(name):
    return lambda state: state["installed"].pop(name)


def add_pin(state):
    state["negative_pins"] = [{"file": "/etc/apt/preferences.d/freeze-nvidia.pref", "line": 2,
                               "pin": "Pin: release o=NVIDIA", "package": "*", "priority": -10}]


def stop(unit):
    return lambda state: state["services"][unit].update(active="inactive")


def mismatch(state):
    state["driver"] = {"state": "mismatch", "version": None, "branch": None, "library_version": "615.71.09",
                       "kernel_module_version": "580.95.05"}


def half_installed(state):
    """What dpkg leaves when apt is killed between unpacking and configuring a package."""
    state["installed"].pop("nvidia-driver-open", None)
    state["unfinished"] = [{"package": "nvidia-driver-open", "version": "580.95.05-1",
                            "status": "unpacked, not configured"}]


def interrupted(state):
    state["dpkg_interrupted"] = True


def other_sources(state):
    state["files"][SOURCES]["paragraphs"][0]["URIs"] = "https://mirror.example.com/debian12/x86_64/"


# (id, the read, wanted's keywords, the steps planned, words of the first step's reason)
CASES = [
    ("converged", converged(), {}, [], None),
    ("fresh node", recorded("fresh.json"), {}, ["repo", "pin", "kernel", "install", "verify"],
     "python3-debian is not installed"),
    ("a negative pin", drift(add_pin), {}, ["preferences", "install", "verify"],
     "freeze-nvidia.pref line 2 ('Pin: release o=NVIDIA', Pin-Priority -10)"),
    ("the pin removed", drift(uninstall("nvidia-driver-pinning-580")), {}, ["pin", "install", "verify"],
     "nvidia-driver-pinning-580 is not installed"),
    ("another branch wanted", converged(), {"branch": 615}, ["pin", "install", "verify"],
     "nvidia-driver-pinning-615 is not installed"),
    ("the repository entry changed", drift(other_sources), {}, ["repo", "install", "verify"],
     "the sources entry %s differs (URIs)" % SOURCES),
    ("the repository entry's mode", drift(set_file(SOURCES, mode="0600")), {}, ["repo", "install", "verify"],
     "is not root:root mode 0644"),
    ("the repository entry removed", drift(set_file(SOURCES, exists=False)), {}, ["repo", "install", "verify"],
     "%s is missing" % SOURCES),
    ("cuda-keyring's own entry back", drift(set_file(KEYRING_LIST, exists=True, type="file")), {},
     ["repo", "install", "verify"], "cuda-keyring's own entry"),
    ("a login left behind", drift(set_file(AUTH, exists=True, type="file", mode="0600", uid=0, gid=0, sha256="ab")),
     {}, ["repo", "install", "verify"], "holds a mirror login no longer set"),
    ("a login wanted, none written", converged(), {"auth_sha256": "ab"}, ["repo", "install", "verify"],
     "the mirror login: %s is missing" % AUTH),
    ("a login written as wanted",
     drift(set_file(AUTH, exists=True, type="file", mode="0600", uid=0, gid=0, sha256="ab")), {"auth_sha256": "ab"},
     [], None),
    ("a login with another password",
     drift(set_file(AUTH, exists=True, type="file", mode="0600", uid=0, gid=0, sha256="cd")), {"auth_sha256": "ab"},
     ["repo", "install", "verify"], "does not hold what the role writes"),
    ("the nouveau blacklist removed", drift(set_file(BLACKLIST, exists=False)), {}, ["kernel"],
     "the nouveau blacklist: %s is missing" % BLACKLIST),
    ("the nouveau blacklist edited", drift(set_file(BLACKLIST, sha256="0" * 64)), {}, ["kernel"],
     "does not hold what the role writes"),
    ("the blacklist not managed", drift(set_file(BLACKLIST, exists=False)), {"blacklist": False}, [], None),
    ("the headers removed", drift(set_file(BUILD, exists=False)), {}, ["kernel"], "no kernel headers"),
    ("Fabric Manager stopped", drift(stop("nvidia-fabricmanager")), {}, ["verify"],
     "nvidia-fabricmanager is enabled and inactive"),
    ("Fabric Manager stopped, not wanted", drift(stop("nvidia-fabricmanager")), {"fabricmanager": "never"}, [],
     None),
    ("nvidia-persistenced stopped", drift(stop("nvidia-persistenced")), {}, ["verify"],
     "nvidia-persistenced is enabled and inactive"),
    ("a driver installed, not loaded", drift(mismatch), {}, ["install", "verify"],
     "the driver installed is not the one loaded"),
    ("a package dpkg left unpacked", drift(half_installed), {}, ["repair", "install", "verify"],
     "dpkg left nvidia-driver-open 580.95.05-1 unpacked, not configured"),
    ("dpkg's journal of a run cut short", drift(interrupted), {}, ["repair", "install", "verify"],
     "dpkg was interrupted (its journal in /var/lib/dpkg/updates)"),
    ("a version asked for that is not installed", converged(), {"branch": 615, "version": "615.71.09"},
     ["pin", "install", "verify"], None),
]


@pytest.mark.parametrize("state, keywords, steps, words", [case[1:] for case in CASES], ids=[c[0] for c in CASES])
def test_the_plan_names_the_steps_a_node_needs(state, keywords, steps, words):
    before = copy.deepcopy(state)
    result = driver_plan.plan(state, wanted(state, **keywords))
    assert list(result["steps"]) == steps, result["summary"]
    assert state == before
    if words:
        assert words in result["steps"][steps[0]][0], result["steps"]
    if not steps:
        assert result["summary"].startswith("nothing to do: driver 580.95.05 of branch 580 loaded")
    else:
        assert result["summary"].startswith(steps[0] + " (")


def test_a_folder_read_whole_says_which_of_its_files_are_missing():
    """The role reads /etc/apt/sources.list.d whole (the entries' names come from the host
    facts of the same read): a file of that folder absent from the read does not exist,
    and a path outside the folders read is still 'not read'."""
    state = converged()
    state["listed_dirs"] = ["/etc/apt/sources.list.d"]
    for path in [p for p in state["files"] if p.startswith("/etc/apt/sources.list.d/")
                 and not state["files"][p].get("exists")]:
        del state["files"][path]
    assert driver_plan.plan(state, wanted(state))["steps"] == {}
    del state["files"][SOURCES]
    steps = driver_plan.plan(state, wanted(state))["steps"]
    assert steps["repo"] == ["the sources entry: %s is missing" % SOURCES], steps
    del state["files"][BLACKLIST]
    assert driver_plan.plan(state, wanted(state))["steps"]["kernel"] == [
        "the nouveau blacklist: %s was not read" % BLACKLIST]


def test_the_version_asked_for_is_what_install_gives_as_its_reason():
    state = converged()
    result = driver_plan.plan(state, wanted(state, version="580.95.05"))
    assert result["steps"] == {}
    state["installed"]["nvidia-driver-open"] = "580.76.05-1"
    state["apt"]["nvidia-driver-open"]["installed"] = {"version": "580.76.05-1", "upstream": "580.76.05"}
    result = driver_plan.plan(state, wanted(state, version="580.95.05"))
    assert result["steps"]["install"] == ["to install: nvidia-driver-open=580.95.05-1"]


def test_a_sources_file_read_as_deb822():
    text = ("# comment\nX-Repolib-Name: cuda\nTypes: deb\nURIs: http://a/\nSuites: /\nSigned-By:\n"
            " -----BEGIN PGP PUBLIC KEY BLOCK-----\n .\n -----END PGP PUBLIC KEY BLOCK-----\n\nTypes: deb-src\n")
    paragraphs = driver_plan.parse_deb822(text)
    assert len(paragraphs) == 2 and paragraphs[1] == {"Types": "deb-src"}
    assert paragraphs[0]["Signed-By"].splitlines() == [
        "", "-----BEGIN PGP PUBLIC KEY BLOCK-----", ".", "-----END PGP PUBLIC KEY BLOCK-----"]


def test_file_state_never_returns_the_text(tmp_path):
    secret = tmp_path / "auth.conf"
    secret.write_text("machine m login u password hunter2\n")
    secret.chmod(0o600)
    found = driver_plan.file_state(str(secret))
    assert found["type"] == "file" and found["mode"] == "0600"
    assert found["sha256"] == hashlib.sha256(b"machine m login u password hunter2\n").hexdigest()
    assert "hunter2" not in json.dumps(found)
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    assert driver_plan.file_state(str(tmp_path / "link"))["type"] == "link"
    assert driver_plan.file_state(str(tmp_path / "absent")) == {"exists": False}
    assert driver_plan.file_state(str(tmp_path))["type"] == "directory"


@pytest.mark.parametrize("state, want, words", [
    ([], {}, "expected smshare.kai.nvidia_driver_info's result, got list"),
    ({}, {"branch": 615}, "the wanted state lacks pin_package, keyring_list"),
])
def test_the_filter_refuses_what_is_not_a_read_and_a_want(state, want, words):
    with pytest.raises(AnsibleFilterError, match=words):
        nvidia_driver_plan(state, want)


def test_the_filter_gives_the_rules_answer():
    state = converged()
    assert nvidia_driver_plan(state, wanted(state)) == driver_plan.plan(state, wanted(state))
