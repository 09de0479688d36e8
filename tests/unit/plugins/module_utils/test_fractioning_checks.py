# Apache-2.0
"""The gpu_fractioning verify's log and condition checks
(module_utils/fractioning_checks.py): the guide's mpsd lines in text and in the
fork's structured forms, and the troubleshooting rows named from failing pods.
Each case names the rule it checks."""
import json

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import fractioning_checks as checks

CONFIG = "/etc/nvidia-mps/mps-control.toml"


def slog(msg, **attrs):
    """A line of Go's slog JSON handler (logger.go @ 5440d2c6)."""
    return json.dumps(dict({"time": "2026-09-18T12:00:00.123456789Z", "level": "INFO", "msg": msg}, **attrs),
                      separators=(",", ":"))


START_M = slog("starting MPS daemon", binary="/usr/bin/nvidia-cuda-mps-control",
               args=["-p", "3", "-m", "-f", "-a", CONFIG], pipeDir="/run/nvidia-mps", logDir="/var/log/nvidia-mps",
               configPath=CONFIG)
START_NO_M = slog("starting MPS daemon", binary="/usr/bin/nvidia-cuda-mps-control",
                  args=["-p", "3", "-f", "-a", CONFIG], pipeDir="/run/nvidia-mps", logDir="/var/log/nvidia-mps",
                  configPath=CONFIG)
CAP_10 = slog("capped the default MPS namespace as defence in depth", server="shared", namespace="default",
              activeThreadPercent=10)
CAP_25 = slog("capped the default MPS namespace as defence in depth", server="shared", namespace="default",
              activeThreadPercent=25)
# The guide's expected text (step 4) and the MPS control daemon's log format.
ADDING = "[2026-09-18 12:00:00.123 Control  4242] Adding server 'shared' [multiuser enabled]"
TEXT_CAP = "[2026-09-18 12:00:01.000 Control  4242] Namespace 'default' on server 'shared': active thread percentage 10"
GUIDE_CAP = "capping the default namespace at 10% active thread percentage"
LOGFMT_START = ('time=2026-09-18T12:00:00.000Z level=INFO msg="starting MPS daemon" '
                'binary=/usr/bin/nvidia-cuda-mps-control args="[-p 3 -m -f -a /etc/nvidia-mps/mps-control.toml]"')
LOGFMT_CAP = ('time=2026-09-18T12:00:01.000Z level=INFO msg="capped the default MPS namespace as defence in depth" '
              'server=shared namespace=default activeThreadPercent=10')
NOISE = [slog("starting mpsd", pipeDir="/run/nvidia-mps", logDir="/var/log/nvidia-mps",
              mpsBinary="/usr/bin/nvidia-cuda-mps-control", controlPort="3", configPath=CONFIG, memacctAuditLog=True),
         slog("wrote MPS config", path=CONFIG),
         "[2026-09-18 12:00:00.100 Control  4242] Starting control daemon using socket /run/nvidia-mps/control",
         "[2026-09-18 12:00:00.100 Control  4242] To connect CUDA applications to this daemon, set env "
         "CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps"]


@pytest.mark.parametrize("lines, multiuser, default_cap", [
    (NOISE + [START_M, CAP_10], True, True),
    (NOISE + [ADDING, TEXT_CAP], True, True),
    ([ADDING, GUIDE_CAP], True, True),
    (NOISE + [START_M, ADDING, TEXT_CAP, CAP_10], True, True),
    ([LOGFMT_START, LOGFMT_CAP], True, True),
    ([START_NO_M, CAP_10], False, True),
    ([START_NO_M, TEXT_CAP], False, True),
    ([START_M], True, False),
    ([START_M, CAP_25], True, False),
    ([ADDING, "[x Control 1] Namespace 'default' on server 'shared': active thread percentage 100"], True, False),
    (NOISE, False, False),
    ([], False, False),
], ids=["json-start-with-m-and-json-cap", "guide-text-lines", "guide-wording-of-the-cap",
        "both-forms-together", "logfmt-forms", "json-start-without-m", "text-cap-without-multiuser",
        "no-cap-line", "cap-at-another-percentage", "default-left-at-100", "startup-noise-only", "empty-log"])
def test_mpsd_startup(lines, multiuser, default_cap):
    found = checks.mpsd_startup(lines, 10)
    assert (found["multiuser"], found["default_cap"]) == (multiuser, default_cap), found
    assert len(found["missing"]) == (not multiuser) + (not default_cap)


def test_mpsd_startup_says_what_is_missing():
    found = checks.mpsd_startup([START_NO_M, CAP_25], 10)
    assert found["args"] == ["-p", "3", "-f", "-a", CONFIG]
    assert found["missing"] == [
        "multi-user mode: mpsd started MPS without -m (args -p 3 -f -a %s) and the MPS daemon never logged "
        "Adding server 'shared' [multiuser enabled]" % CONFIG,
        "the default namespace cap at 10%: it is capped at 25% instead"]
    assert checks.mpsd_startup([], 10)["missing"] == [
        "multi-user mode: no Adding server 'shared' [multiuser enabled] line and no mpsd 'starting MPS daemon' "
        "line with -m", "the default namespace cap at 10%: no line caps the default namespace"]


@pytest.mark.parametrize("lines, percentage, default_cap", [
    ([CAP_25], 25, True), ([TEXT_CAP], 10.0, True), ([CAP_10], 25, False),
    ([slog("capped the default MPS namespace as defence in depth", server="shared", namespace="default",
           activeThreadPercent="10")], 10, True),
    ([slog("provisioned MPS namespace", namespace="kai_abc_0011", activeThreadPercent=10)], 10, False),
], ids=["the-percentage-is-a-variable", "float-percentage", "another-variable-value", "string-percentage",
        "a-pods-namespace-is-not-the-default"])
def test_mpsd_startup_cap_percentage(lines, percentage, default_cap):
    assert checks.mpsd_startup(lines, percentage)["default_cap"] is default_cap


def test_mpsd_startup_reads_the_last_start():
    assert checks.mpsd_startup([START_M, START_NO_M, CAP_10])["multiuser"] is False
    assert checks.mpsd_startup([START_NO_M, START_M, CAP_10])["multiuser"] is True


def test_since_last_keeps_the_current_run_of_an_appended_log():
    text = ("[t1] Starting control daemon\n[t1] Adding server 'shared' [multiuser enabled]\n"
            "[t2] Starting control daemon\n[t2] NEW SERVER 7: Ready\n")
    assert checks.since_last(text, "Starting control daemon") == [
        "[t2] Starting control daemon", "[t2] NEW SERVER 7: Ready"]
    assert checks.since_last("a\nb\n", "nothing") == ["a", "b"]


@pytest.mark.parametrize("line, expected", [
    ('{"msg": "x", "a": 1}', {"msg": "x", "a": 1}),
    ('msg="a b" k=v q="x \\"y\\""', {"msg": "a b", "k": "v", "q": 'x "y"'}),
    ("[2026 Control 1] Adding server", None),
    ("set env CUDA_MPS_PIPE_DIRECTORY=/run/nvidia-mps", None),
    ("{not json", None),
    ('["a list"]', None),
], ids=["json-object", "logfmt-with-quotes", "text", "text-with-an-equals-sign", "broken-json", "json-not-object"])
def test_structured(line, expected):
    assert checks.structured(line) == expected


# ---------------------------------------------------------------- failing pods
def pod(name, component, statuses, node="gpu-1", limit=None, containers=None, deleting=False):
    containers = containers or [component]
    spec = {"nodeName": node, "containers": [
        {"name": c, "resources": {"limits": {"memory": limit}} if limit and c == "mpsd" else {}} for c in containers]}
    meta = {"name": name, "labels": {"app.kubernetes.io/component": component}}
    if deleting:
        meta["deletionTimestamp"] = "now"
    return {"metadata": meta, "spec": spec, "status": {"containerStatuses": statuses}}


def crashing(name="mpsd", restarts=3):
    return {"name": name, "ready": False, "restartCount": restarts,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}}


def running(name, ready):
    return {"name": name, "ready": ready, "restartCount": 0, "state": {"running": {}}}


def test_failing_containers():
    pods = [pod("mpsd-x", "mpsd", [crashing()], limit="256Mi"),
            pod("fractiond-y", "fractiond", [running("fractiond", False), running("metricsd", True)],
                containers=["fractiond", "metricsd"]),
            pod("mpsd-ok", "mpsd", [running("mpsd", True)], node="gpu-2"),
            pod("mpsd-old", "mpsd", [crashing()], deleting=True)]
    mpsd_x = {"pod": "mpsd-x", "node": "gpu-1", "component": "mpsd", "container": "mpsd", "previous": True,
              "reason": "CrashLoopBackOff", "memory_limit": "256Mi"}
    assert checks.failing_containers(pods) == [
        mpsd_x, dict(mpsd_x, previous=False),
        {"pod": "fractiond-y", "node": "gpu-1", "component": "fractiond", "container": "fractiond",
         "previous": False, "reason": "not ready", "memory_limit": None}]
    rows = [{"ok": False, "not_ready": [{"pod": "fractiond-y"}]}, {"ok": True, "not_ready": []}]
    assert [c["pod"] for c in checks.failing_containers(pods, rows)] == ["fractiond-y"]


@pytest.mark.parametrize("state", [{"terminated": {"reason": "Error"}}, {"running": {}},
                                   {"waiting": {"reason": "CrashLoopBackOff"}}])
def test_a_container_that_restarted_is_read_from_this_run_and_the_one_before(state):
    """It may have restarted, or crashed again, between the read of the pod and of its log."""
    found = checks.failing_containers([pod("mpsd-x", "mpsd", [{"name": "mpsd", "ready": False, "restartCount": 2,
                                                               "state": state}])])
    assert [f["previous"] for f in found] == [True, False]


def test_the_runs_of_one_container_are_one_log():
    """The crash in the run before counts when this run has not printed it yet."""
    [item_before, item_now] = checks.failing_containers([pod("mpsd-x", "mpsd", [crashing()])])
    found = checks.symptoms([{"item": item_before, "log_lines": [OOM_LINE]},
                             {"item": item_now, "log_lines": ["[2026-09-18 12:00:05.000 Control  4243] Starting"]}],
                            nodes=NODES)
    assert [f["symptom"] for f in found] == ["mpsd_out_of_memory"]


def test_a_container_that_never_started_is_read_from_its_current_run():
    [found] = checks.failing_containers([pod("mpsd-x", "mpsd", [{"name": "mpsd", "ready": False, "restartCount": 0,
                                                                 "state": {"waiting": {"reason": "ContainerCreating"}}}])])
    assert (found["previous"], found["reason"]) == (False, "ContainerCreating")


# ---------------------------------------------------------------- symptoms
OOM_LINE = ("[2026-09-18 12:00:00.123 Control  4242] Server 'shared' failed to start: creating the CUDA context on "
            "device 5 (GPU-0) failed: CUDA_ERROR_OUT_OF_MEMORY: out of memory")
NODES = [{"metadata": {"name": "gpu-1", "labels": {"nvidia.com/gpu.count": "8"}}}]


def log_result(component, lines, container=None, memory_limit=None, pod_name=None):
    return {"item": {"pod": pod_name or component + "-abcde", "node": "gpu-1", "component": component,
                     "container": container or component, "memory_limit": memory_limit},
            "log_lines": lines}


def ready(status, reason, message=""):
    return {"status": {"conditions": [{"type": "Ready", "status": status, "reason": reason, "message": message}]}}


@pytest.mark.parametrize("logs, config, symptom, parts", [
    ([log_result("mpsd", NOISE + [START_M, OOM_LINE], memory_limit="256Mi")], None, "mpsd_out_of_memory",
     ["mpsd pod mpsd-abcde on gpu-1 exits with CUDA_ERROR_OUT_OF_MEMORY", "limit (256Mi)",
      "raise mpsDaemon.resources.limits.memory (gpu_fractioning_mpsd_memory_limit", "about 50 MiB per GPU",
      "gpu-1 has 8 GPUs: at least 400 MiB, 512Mi with headroom"]),
    ([log_result("fractiond", [slog("connecting to NRI runtime", socket="/var/run/nri/nri.sock"),
                               slog("NRI socket /var/run/nri/nri.sock not available; retrying")])], None,
     "fractiond_not_registered",
     ["did not register as an NRI plugin", "NRI socket /var/run/nri/nri.sock not available",
      "gpu_fractioning_nri_socket_path, now /var/snap/microk8s/common/run/nri.sock",
      "k3s/RKE2: criSocketPath /run/k3s/containerd/containerd.sock"]),
    ([log_result("fractiond", [slog("connecting to NRI runtime")])], None, "fractiond_not_registered",
     ["no 'configured NRI plugin' line in its log"]),
    ([], ready("False", "GPUOperatorVersionUnsupported",
               "NVIDIA GPU Operator version v26.3.3 is below minimum supported version v26.7.1"),
     "gpu_operator_version_unsupported",
     ["GPUOperatorVersionUnsupported (NVIDIA GPU Operator version v26.3.3 is below minimum supported version "
      "v26.7.1)", "gpu_fractioning_gpu_operator_minimum_version", "now v26.7.1", "set v26.7.0", '"" to skip']),
], ids=["mpsd-crash-loop-out-of-memory-names-the-knob", "fractiond-nri-socket-not-available",
        "fractiond-never-configured", "gpu-operator-below-minimum-version"])
def test_symptoms(logs, config, symptom, parts):
    settings = {"nri_socket_path": "/var/snap/microk8s/common/run/nri.sock",
                "gpu_operator_minimum_version": "v26.7.1"}
    [found] = checks.symptoms(logs, config, settings, NODES)
    assert found["symptom"] == symptom
    for part in parts:
        assert part in found["message"], (part, found["message"])


@pytest.mark.parametrize("logs, config", [
    ([log_result("mpsd", NOISE + [START_M, CAP_10])], None),
    ([log_result("fractiond", [slog("configured NRI plugin", runtime="containerd", runtimeVersion="v2.0.4")])], None),
    ([log_result("metricsd", ["serving"], container="metricsd")], None),
    ([log_result("fractiond", ["NRI socket /x not available"], container="metricsd")], None),
    ([], ready("False", "ComponentNotReady", "not ready: MpsdReady")),
    ([], ready("True", "AllComponentsReady")),
    ([], None),
], ids=["mpsd-not-ready-without-oom", "fractiond-registered", "metricsd-sidecar", "the-sidecar-log-is-not-fractiond",
        "config-not-ready-for-another-reason", "config-ready", "nothing"])
def test_no_symptom(logs, config):
    assert checks.symptoms(logs, config, {}, NODES) == []


def test_symptoms_without_node_gpu_counts_or_a_limit_use_the_default():
    [found] = checks.symptoms([log_result("mpsd", [OOM_LINE])], None, {}, [])
    assert "limit (1Gi)" in found["message"] and "GPUs: at least" not in found["message"]
    [found] = checks.symptoms([log_result("mpsd", [OOM_LINE])], None, {"mpsd_memory_limit": "768Mi"}, [])
    assert "limit (768Mi)" in found["message"]


def test_symptoms_read_a_plain_log_text_too():
    [found] = checks.symptoms([{"pod": "mpsd-1", "node": "gpu-1", "component": "mpsd", "log": OOM_LINE}])
    assert found["evidence"] == OOM_LINE


# ---------------------------------------------------------------- the current DaemonSets
def daemonset(name, owner, deleting=False):
    meta = {"name": name, "ownerReferences": [{"kind": "GpuFractioningConfig", "uid": owner}]}
    if deleting:
        meta["deletionTimestamp"] = "now"
    return {"metadata": meta}


@pytest.mark.parametrize("daemonsets, config, expected", [
    ([daemonset("mpsd", "new"), daemonset("fractiond", "new")], {"metadata": {"uid": "new"}}, ["mpsd", "fractiond"]),
    ([daemonset("mpsd", "old"), daemonset("fractiond", "old")], {"metadata": {"uid": "new"}}, []),
    ([daemonset("mpsd", "old", deleting=True), daemonset("mpsd", "new")], {"metadata": {"uid": "new"}}, ["mpsd"]),
    ([daemonset("mpsd", "old"), daemonset("fractiond", "old", deleting=True)], None, ["mpsd"]),
], ids=["owned-by-the-config-now", "left-from-the-config-an-upgrade-replaced", "one-being-deleted",
        "no-config-known-keeps-those-not-deleted"])
def test_current_daemonsets(daemonsets, config, expected):
    assert [d["metadata"]["name"] for d in checks.current_daemonsets(daemonsets, config)] == expected
