# Apache-2.0
"""mps_control's plan alone: a pure function from (current state, wanted
state) to steps and the settings before and after them. No host, no tool."""
import copy

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import mps
from ansible_collections.smshare.kai.plugins.module_utils.runner import ToolError
from ansible_collections.smshare.kai.plugins.modules import mps_control

PIPE, LOG = "/run/nvidia-mps", "/var/log/nvidia-mps"
PARAMS = {"state": "present", "pipe_directory": PIPE, "log_directory": LOG, "directory_owner": None,
          "directory_group": None, "pipe_directory_mode": None, "log_directory_mode": None, "protocol": 3,
          "multiuser": True, "config_file": None, "restart": False, "default_active_thread_percentage": None,
          "default_pinned_mem_limits": None, "namespaces": None, "timeout": 30}
HERE = {"exists": True, "is_dir": True, "mode": 0o755, "uid": 0, "gid": 0, "ancestor": None,
        "ancestor_is_dir": None, "ancestor_writable": None}
MISSING = {"exists": False, "is_dir": False, "mode": None, "uid": None, "gid": None, "ancestor": "/run",
           "ancestor_is_dir": True, "ancestor_writable": True}
SHARED = "shared"   # a server of the daemon's configuration file


def wanted(**params):
    return mps_control.check_input(dict(PARAMS, **params))


def ns(name, pct, server="shared", state="present"):
    return {"server": server, "name": name, "state": state, "active_thread_percentage": pct}


def daemon(running=True, protocol=3, multiuser=True, config_file=None, pct=100.0, limits=None,
           servers=(SHARED,), namespaces=None, server_pids=(4242,), clients=()):
    state = dict(mps.NOT_RUNNING, running=running, server_pids=list(server_pids) if running else [],
                 servers=list(servers) if running else [], default_active_thread_percentage=pct if running else None,
                 default_pinned_mem_limits=dict(limits or {}), namespaces={}, clients=list(clients))
    if running:
        state.update(pid=999, protocol=protocol, multiuser=multiuser, config_file=config_file)
        for server, spaces in (namespaces or {}).items():
            state["namespaces"][server] = [{"namespace": n, "active_thread_percentage": p,
                                            "pinned_memory_limit_mib": None}
                                           for n, p in spaces.items()]
    return state


def current(the_daemon=None, installed=True, v3=True, gpu_count=None, dirs=None, config_servers=None, euid=0):
    return {"installed": installed, "v3": mps.v3_support(list(mps.NAMESPACE_VERBS) if v3 else ["list"]),
            "gpu_count": gpu_count, "euid": euid, "groups": [0],
            "config_servers": config_servers, "daemon": the_daemon or daemon(running=False),
            "directories": dirs or {PIPE: dict(HERE), LOG: dict(HERE)}}


def verbs(planned):
    return [(s["do"], s.get("verb"), s.get("params")) for s in planned["steps"]]


def refused(state, want):
    before = copy.deepcopy(state)
    with pytest.raises(ToolError) as caught:
        mps_control.plan(state, want)
    assert state == before, "plan changed its input"
    return caught.value


# ---------------------------------------------------------------- converging
def test_fresh_node_creates_directories_starts_and_sets():
    state = current(dirs={PIPE: dict(MISSING), LOG: dict(MISSING, ancestor="/var/log")}, gpu_count=1)
    planned = mps_control.plan(state, wanted(default_active_thread_percentage=50,
                                             default_pinned_mem_limits={"0": "40G"}, pipe_directory_mode="0700"))
    assert verbs(planned) == [
        ("directory", None, None), ("directory", None, None), ("start", None, None),
        ("verb", "set_default_active_thread_percentage", {"percentage": 50}),
        ("verb", "set_default_device_pinned_mem_limit", {"device": 0, "limit": "40960M"})]
    assert [(s["path"], s["create"], s["mode"]) for s in planned["steps"][:2]] == [
        (PIPE, True, 0o700), (LOG, True, mps.DEFAULT_DIRECTORY_MODE)]
    assert planned["before"]["running"] is False and planned["before"]["directories"][PIPE] is None
    after = planned["after"]
    assert after["running"] and after["protocol"] == 3 and after["multiuser"]
    assert after["default_active_thread_percentage"] == 50.0
    assert after["default_pinned_mem_limits"] == {"0": 40960}
    assert after["directories"][PIPE]["mode"] == "0700"


def test_converged_daemon_has_an_empty_plan():
    state = current(daemon(pct=50.0, limits={"0": 40960}, namespaces={"shared": {"default": 10, "pod_a": 50}}),
                    gpu_count=1)
    planned = mps_control.plan(state, wanted(default_active_thread_percentage=50, default_pinned_mem_limits={"0": "40G"},
                                             namespaces=[ns("pod_a", 50)]))
    assert planned["steps"] == [] and planned["before"] == planned["after"]


def test_namespaces_create_set_delete_only_what_differs():
    state = current(daemon(namespaces={"shared": {"default": 10, "pod_b": 30, "old": 20}}))
    planned = mps_control.plan(state, wanted(namespaces=[ns("pod_a", 50), ns("pod_b", 25), ns("old", None, state="absent"),
                                                         ns("gone", None, state="absent")]))
    # a new namespace: created (no cap on the r615 create), then capped, as the fork's mpsd does
    assert verbs(planned) == [
        ("verb", "namespace_create", {"server": "shared", "name": "pod_a"}),
        ("verb", "namespace_set", {"server": "shared", "name": "pod_a", "percentage": 50}),
        ("verb", "namespace_set", {"server": "shared", "name": "pod_b", "percentage": 25}),
        ("verb", "namespace_delete", {"server": "shared", "name": "old"})]
    assert planned["after"]["namespaces"] == {"shared": {"default": 10.0, "pod_a": 50.0, "pod_b": 25.0}}


CLIENT = {"pid": 3167082, "server": "shared", "device": "GPU-1", "namespace": "pod_b", "command": "deviceQuery"}


@pytest.mark.parametrize("change, what", [(ns("pod_b", 25), "change"), (ns("pod_b", None, state="absent"), "delete")])
def test_a_namespace_with_a_client_attached_is_not_touched(change, what):
    state = current(daemon(namespaces={"shared": {"default": 10, "pod_b": 30}}, clients=[CLIENT]))
    exc = refused(state, wanted(namespaces=[change]))
    assert exc.kind == "namespace_busy" and "3167082 deviceQuery" in exc.msg and "cannot %s" % what in exc.msg
    # a client of another namespace is no obstacle; an unchanged namespace needs no check
    other = dict(CLIENT, namespace="default")
    assert verbs(mps_control.plan(current(daemon(namespaces={"shared": {"default": 10, "pod_b": 30}},
                                                 clients=[other])), wanted(namespaces=[change])))
    assert mps_control.plan(state, wanted(namespaces=[ns("pod_b", 30)]))["steps"] == []


def test_a_fresh_start_knows_the_configured_namespaces():
    config = mps.config_file_servers('[servers.shared]\n[servers.shared.namespaces.default]\n'
                                     'active_thread_percentage = "10"\n[servers.shared.namespaces.pod_a]\n'
                                     'active_thread_percentage = "50"\n')
    state = current(config_servers=config)
    planned = mps_control.plan(state, wanted(config_file=__file__, namespaces=[ns("pod_a", 50), ns("pod_b", 25)]))
    assert verbs(planned) == [("start", None, None),
                              ("verb", "namespace_create", {"server": "shared", "name": "pod_b"}),
                              ("verb", "namespace_set", {"server": "shared", "name": "pod_b", "percentage": 25})]
    assert planned["after"]["namespaces"] == {"shared": {"default": 10.0, "pod_a": 50.0, "pod_b": 25.0}}


def test_defaults_on_running_servers_warn():
    planned = mps_control.plan(current(daemon(pct=100.0)), wanted(default_active_thread_percentage=40))
    assert planned["warnings"] and "4242" in planned["warnings"][0]
    assert not mps_control.plan(current(daemon(pct=100.0, server_pids=())),
                                wanted(default_active_thread_percentage=40))["warnings"]


def test_restart_quits_then_starts_and_resets_the_defaults():
    state = current(daemon(protocol=2, multiuser=False, pct=50.0))
    planned = mps_control.plan(state, wanted(restart=True, default_active_thread_percentage=50))
    assert verbs(planned) == [("quit", None, None), ("start", None, None),
                              ("verb", "set_default_active_thread_percentage", {"percentage": 50})]


def test_one_directory_for_pipe_and_log():
    state = current(dirs={PIPE: dict(MISSING)})
    planned = mps_control.plan(state, wanted(log_directory=PIPE, log_directory_mode="0700"))
    assert [(s["path"], s["mode"]) for s in planned["steps"] if s["do"] == "directory"] == [(PIPE, 0o700)]


def test_mode_0000_is_a_mode_not_a_missing_one():
    state = current(dirs={PIPE: dict(MISSING), LOG: dict(HERE)}, the_daemon=daemon())
    planned = mps_control.plan(state, wanted(pipe_directory_mode="0000"))
    assert [(s["path"], s["mode"]) for s in planned["steps"]] == [(PIPE, 0)]


def test_existing_directory_gets_only_the_mode_that_differs():
    state = current(dirs={PIPE: dict(HERE, mode=0o700), LOG: dict(HERE)}, the_daemon=daemon())
    planned = mps_control.plan(state, wanted(pipe_directory_mode="0755", log_directory_mode="0755"))
    assert [(s["path"], s["create"], s["mode"], s["uid"]) for s in planned["steps"]] == [(PIPE, False, 0o755, None)]
    assert planned["before"]["directories"][PIPE]["mode"] == "0700"
    assert planned["after"]["directories"][PIPE]["mode"] == "0755"


def test_stop():
    planned = mps_control.plan(current(daemon()), wanted(state="absent"))
    assert verbs(planned) == [("quit", None, None)] and planned["after"]["running"] is False
    assert mps_control.plan(current(), wanted(state="absent"))["steps"] == []
    assert mps_control.plan(current(installed=False), wanted(state="absent"))["steps"] == []


# ---------------------------------------------------------------- refusals
@pytest.mark.parametrize("state, params, failure, words", [
    (current(installed=False), {}, mps.MISSING, "not installed"),
    (current(v3=False), {}, "v3_unsupported", "lacks create, delete, get, set"),
    (current(gpu_count=1), {"default_pinned_mem_limits": {"1": "40G"}}, "unknown_gpu", "has 1 GPU (indexes 0 to 0)"),
    (current(daemon(protocol=2)), {}, "mismatch", "protocol 2 (wanted 3)"),
    (current(daemon(config_file="/etc/a.toml")), {}, "mismatch", "config_file /etc/a.toml (wanted None)"),
    (current(daemon()), {"namespaces": [ns("a", 50, server="nosuch")]}, "unknown_server", "the daemon has shared"),
    (current(daemon(servers=())), {"namespaces": [ns("a", 50)]}, "unknown_server", "no named servers"),
    (current(), {"namespaces": [ns("a", 50)]}, "unknown_server", "declare them in config_file"),
    (current(dirs={PIPE: dict(HERE, is_dir=False), LOG: dict(HERE)}), {}, "bad_input", "is not a directory"),
    (current(dirs={PIPE: dict(MISSING, ancestor_is_dir=False, ancestor="/run/x"), LOG: dict(HERE)}), {},
     "bad_input", "/run/x is not a directory"),
    (current(dirs={PIPE: dict(MISSING, ancestor_writable=False), LOG: dict(HERE)}, euid=1000), {},
     "permission_denied", "not writable"),
    (current(dirs={PIPE: dict(HERE), LOG: dict(HERE)}, euid=1000), {"pipe_directory_mode": "0700"},
     "permission_denied", "needs root"),
    (current(dirs={PIPE: dict(MISSING), LOG: dict(HERE)}, euid=1000), {"directory_owner": "0"},
     "permission_denied", "needs root"),
])
def test_refusals_happen_before_any_step(state, params, failure, words):
    exc = refused(state, wanted(**params))
    assert exc.kind == failure and words in exc.msg, exc.msg


def test_a_refusal_anywhere_refuses_the_whole_plan():
    """Directories and defaults would change, but a namespace names an unknown
    server: nothing at all is planned, so nothing is done."""
    state = current(daemon(), dirs={PIPE: dict(MISSING), LOG: dict(MISSING)})
    exc = refused(state, wanted(default_active_thread_percentage=30, namespaces=[ns("a", 50, server="other")]))
    assert exc.kind == "unknown_server"
