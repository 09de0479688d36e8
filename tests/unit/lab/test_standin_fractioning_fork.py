# Apache-2.0
"""The stand-in gpu-fractioning fork as the fork behaves (issue 20, the guide's
tables): mpsd's TOML, argv, JSON log lines, default-namespace cap and host-memory
failure; the operator's mpsd resources and the GPU Operator gate; the chart's
gpuOperator, mpsDaemon and fractioningAgent values. Sources are named in
lab/standin/controllers/standin/fractioning.py and /tmp/contract/fractioning.md."""
import json
import shutil
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "lab" / "standin" / "controllers"))

from standin import fractioning  # noqa: E402

MPS_BIN = REPO / "lab" / "standin" / "bin" / "nvidia-cuda-mps-control"
FRACTIONING_CHART = REPO / "lab" / "standin" / "forks" / "gpu-fractioning" / "operator" / "charts"
CONFIG = "/etc/nvidia-mps/mps-control.toml"


def gfc(**spec):
    base = {"nodeSelector": {"nvidia.com/gpu.present": "true"}, "metricsAgent": {"enabled": True}}
    base.update(spec)
    return {"metadata": {"name": "default", "uid": "u-1", "generation": 1}, "spec": base}


# ---------------------------------------------------------------- mpsd's TOML and argv
def test_mps_config_is_the_forks_production_toml():
    """K config_test.go @ 0ee10b42, production {true,true,true,"off","shared"}."""
    assert fractioning.mps_config(True, True) == (
        '[features.memacct]\nenabled=true\naudit_log=true\n\n[features.context-share]\nenabled=true\n'
        'default_socket="off"\n\n[servers.shared]\n')
    assert tomllib.loads(fractioning.mps_config())["servers"] == {"shared": {}}


@pytest.mark.parametrize("audit, sm_sharing, expected", [
    (False, True, '[features.memacct]\nenabled=true\naudit_log=false\n\n[features.context-share]\nenabled=true\n'
                  'default_socket="off"\n\n[servers.shared]\n'),
    (True, False, '[features.memacct]\nenabled=true\naudit_log=true\n\n[features.context-share]\nenabled=false\n'),
], ids=["audit-log-off", "sm-sharing-off-no-shared-server"])
def test_mps_config_follows_audit_log_and_sm_sharing(audit, sm_sharing, expected):
    assert fractioning.mps_config(audit, sm_sharing) == expected


@pytest.mark.parametrize("port, multiuser, config, expected", [
    ("3", True, CONFIG, ["-p", "3", "-m", "-f", "-a", CONFIG]),
    ("3", False, CONFIG, ["-p", "3", "-f", "-a", CONFIG]),
    ("", True, CONFIG, ["-m", "-f", "-a", CONFIG]),
    ("3", True, "", ["-p", "3", "-m", "-f"]),
    ("", True, "", ["-m", "-f"]),
    ("", False, "", ["-f"]),
], ids=["production", "without-multiuser", "no-port", "no-config", "multiuser-only", "foreground-only"])
def test_mps_args_are_build_mps_args(port, multiuser, config, expected):
    """G supervisor_test.go TestBuildMPSArgs."""
    assert fractioning.mps_args(port, multiuser, config) == expected


@pytest.mark.parametrize("limit, gpus, expected", [
    (str(2 ** 30), 8, None), (str(256 * 2 ** 20), 8, 5), (str(400 * 2 ** 20), 8, None), (str(399 * 2 ** 20), 8, 7),
    (str(2 ** 30), 24, 20), (None, 8, None), ("", 8, None), (str(2 ** 20), 0, None),
], ids=["1gi-holds-8-gpus", "256mi-fails-at-the-sixth-context", "50mi-per-gpu-is-enough", "one-mib-short",
        "1gi-too-small-for-24", "no-limit", "empty-limit", "no-gpus"])
def test_host_memory_shortfall(limit, gpus, expected):
    assert fractioning.host_memory_shortfall(limit, [{"uuid": "GPU-%d" % i} for i in range(gpus)]) == expected


# ---------------------------------------------------------------- the operator's mpsd DaemonSet
@pytest.mark.parametrize("override, expected", [
    (None, {"requests": {"cpu": "50m", "memory": "128Mi", "ephemeral-storage": "100Mi"}, "limits": {"memory": "1Gi"}}),
    ({"limits": {"memory": "2Gi"}}, {"requests": {"cpu": "50m", "memory": "128Mi", "ephemeral-storage": "100Mi"},
                                     "limits": {"memory": "2Gi"}}),
    ({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}},
     {"requests": {"cpu": "1", "memory": "128Mi", "ephemeral-storage": "100Mi"}, "limits": {"memory": "1Gi", "cpu": "2"}}),
], ids=["defaults", "memory-limit-raised", "entries-merged-not-replaced"])
def test_mpsd_resources_merge_the_config_over_the_forks_defaults(override, expected, monkeypatch):
    monkeypatch.setenv("MPSD_IMAGE_REPOSITORY", "reg/mpsd")
    spec = {"mpsDaemon": {"resources": override}} if override else {}
    container = fractioning.mpsd_daemonset("gf", gfc(**spec), "/lab/host")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"] == expected


def test_mpsd_gets_its_memory_limit_and_the_lab_gpu_table(monkeypatch):
    monkeypatch.setenv("MPSD_IMAGE_REPOSITORY", "reg/mpsd")
    pod = fractioning.mpsd_daemonset("gf", gfc(), "/lab/host")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["MPSD_MEMORY_LIMIT"]["valueFrom"] == {"resourceFieldRef": {"containerName": "mpsd",
                                                                          "resource": "limits.memory"}}
    assert env["NVIDIA_STANDIN_GPUS"]["value"] == "/etc/nvidia-standin/gpus.json"
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["standin-gpus"]["hostPath"] == {"path": "/lab/host/etc/nvidia-standin"}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["standin-gpus"] == {"name": "standin-gpus", "mountPath": "/etc/nvidia-standin", "readOnly": True}
    # Without the lab's host root there is no table to mount.
    pod = fractioning.mpsd_daemonset("gf", gfc(), "")["spec"]["template"]["spec"]
    assert "standin-gpus" not in [v["name"] for v in pod["volumes"]]


@pytest.mark.parametrize("delay, args, grace", [
    (None, [], 75),                                     # mpsd's 60 s default + 15 s
    ("90s", ["--graceful-stop-delay", "90s"], 105),
    ("1m30s", ["--graceful-stop-delay", "1m30s"], 105),
])
def test_mpsd_has_its_graceful_stop_delay_and_a_grace_period_beyond_it(delay, args, grace, monkeypatch):
    monkeypatch.setenv("MPSD_IMAGE_REPOSITORY", "reg/mpsd")
    spec = {"mpsDaemon": {"gracefulStopDelay": delay}} if delay else {}
    pod = fractioning.mpsd_daemonset("gf", gfc(**spec), "")["spec"]["template"]["spec"]
    assert pod["containers"][0]["args"] == args and pod["terminationGracePeriodSeconds"] == grace
    assert fractioning.graceful_stop_delay(args) == grace - 15


def test_mpsd_reads_the_delay_from_its_environment_and_ignores_a_bad_one(monkeypatch):
    monkeypatch.setenv("MPS_GRACEFUL_STOP_DELAY", "500ms")
    assert fractioning.graceful_stop_delay([]) == 0.5
    assert fractioning.graceful_stop_delay(["--graceful-stop-delay=2m"]) == 120
    monkeypatch.setenv("MPS_GRACEFUL_STOP_DELAY", "soon")
    assert fractioning.graceful_stop_delay([]) == 60


# ---------------------------------------------------------------- the GPU Operator gate
READY = ("True", "AllComponentsReady", "all components are healthy")
NOT_READY = ("False", "ComponentNotReady", "not ready: MpsdReady")


def policy(version=None, state="ready", conditions=None):
    labels = {"app.kubernetes.io/component": "gpu-operator"}
    if version is not None:
        labels["app.kubernetes.io/version"] = version
    status = {"state": state} if state is not None else {}
    if conditions:
        status["conditions"] = conditions
    return {"metadata": {"name": "cluster-policy", "labels": labels}, "status": status}


@pytest.mark.parametrize("policies, csvs, minimum, ready, expected", [
    ([policy("v26.7.1")], [], "v26.7.1", READY, READY),
    ([policy("v26.3.3")], [], "v26.7.1", READY,
     ("False", "GPUOperatorVersionUnsupported", "NVIDIA GPU Operator version v26.3.3 is below minimum supported "
                                                "version v26.7.1")),
    ([policy("v26.7.0")], [], "v26.7.1", NOT_READY,
     ("False", "GPUOperatorVersionUnsupported", "NVIDIA GPU Operator version v26.7.0 is below minimum supported "
                                                "version v26.7.1")),
    ([policy("v26.7.0")], [], "v26.7.0", READY, READY),
    ([policy("v26.3.3")], [], "", READY, READY),
    ([policy()], [], "v26.7.1", READY,
     ("False", "GPUOperatorVersionUnsupported", 'NVIDIA GPU Operator version from ClusterPolicy label '
                                                '"app.kubernetes.io/version" is missing; minimum supported version '
                                                'is v26.7.1')),
    ([policy("next")], [], "v26.7.1", READY,
     ("False", "GPUOperatorVersionUnsupported", 'NVIDIA GPU Operator version "next" from ClusterPolicy label '
                                                '"app.kubernetes.io/version" is invalid; minimum supported version '
                                                'is v26.7.1')),
    ([policy("26.8")], [], "v26.7.1", READY, READY),
    ([policy("v26.7.1", state="notReady")], [], "v26.7.1", NOT_READY,
     ("False", "GPUOperatorNotReady", 'NVIDIA GPU Operator ClusterPolicy state is "notReady", expected "ready"')),
    ([policy("v26.7.1", state="notReady")], [], "v26.7.1", READY, READY),
    ([policy("v26.7.1", conditions=[{"type": "Error", "status": "True", "message": "operand failed"}])], [],
     "v26.7.1", NOT_READY, ("False", "GPUOperatorNotReady", "operand failed")),
    ([], [], "v26.7.1", READY, READY),
    ([], [], "v26.7.1", NOT_READY, NOT_READY),
    ([], [{"metadata": {"name": "gpu-operator-certified.v26.3.3"}, "spec": {"version": "26.3.3"}}], "v26.7.1", READY,
     ("False", "GPUOperatorVersionUnsupported", "NVIDIA GPU Operator version 26.3.3 is below minimum supported "
                                                "version v26.7.1")),
    ([], [{"metadata": {"name": "other.v1"}, "spec": {"version": "1.0.0"}}], "v26.7.1", READY, READY),
    (OSError("forbidden"), [], "v26.7.1", READY,
     ("False", "GPUOperatorNotReady", "unable to read NVIDIA GPU Operator ClusterPolicy: forbidden")),
], ids=["supported-version-leaves-ready", "older-version-blocks-ready", "one-patch-below-blocks-a-false-ready",
        "lowered-minimum-accepts-v26-7-0", "empty-minimum-skips-the-check", "missing-version-label",
        "unparsable-version-label", "two-part-version-is-normalized", "unready-policy-refines-a-false-ready",
        "unready-policy-leaves-a-true-ready", "policy-error-condition", "no-gpu-operator-at-all-no-gate",
        "no-gpu-operator-leaves-false-ready", "olm-csv-version", "foreign-csv-ignored", "policy-read-refused"])
def test_gpu_operator_gate(policies, csvs, minimum, ready, expected):
    assert fractioning.gpu_operator_gate(policies, csvs, minimum, ready) == expected


@pytest.mark.parametrize("raw, expected", [
    ("v26.7.1", "v26.7.1"), ("26.7.1", "v26.7.1"), (" v26.7 ", "v26.7.0"), ("", ""), ("bogus", "v26.7.1"),
], ids=["canonical", "without-v", "two-parts", "empty-switches-off", "unparsable-falls-back-to-default"])
def test_minimum_gpu_operator_version(raw, expected):
    assert fractioning.minimum_gpu_operator_version(raw) == expected


def test_the_operator_takes_its_minimum_from_the_charts_flag():
    assert fractioning.operator_flags(["--health-probe-bind-address=:8081", "--min-gpu-operator-version="]) == {
        "min-gpu-operator-version": "", "health-probe-bind-address": ":8081"}
    assert fractioning.operator_flags([])["min-gpu-operator-version"] == "v26.7.1"


@pytest.mark.parametrize("left, right, expected", [
    ("v26.7.1", "v26.7.1", 0), ("v26.7.0", "v26.7.1", -1), ("v26.10.0", "v26.9.9", 1),
    ("v26.7.1-rc.1", "v26.7.1", -1), ("v27.0.0", "v26.99.99", 1),
], ids=["equal", "patch-below", "numeric-not-lexical", "pre-release-sorts-first", "major"])
def test_compare_versions(left, right, expected):
    assert fractioning.compare_versions(left, right) == expected


# ---------------------------------------------------------------- mpsd, run
class FakeStop:
    """Stop after `loops` turns of mpsd's one-second loop."""

    def __init__(self, loops=2):
        self.loops = loops

    def sleep(self, seconds):
        if seconds >= 1:
            self.loops -= 1
            time.sleep(0.2)
            return self.loops > 0
        time.sleep(seconds)
        return True


def run_mpsd(monkeypatch, knobs=None, limit=None, gpus=8, loops=2):
    """mpsd() against the lab's stand-in MPS daemon in a short temporary folder; its rc."""
    folder = Path(tempfile.mkdtemp(prefix="mpsd", dir="/tmp"))   # short: socket paths
    table = folder / "gpus.json"
    table.write_text(json.dumps({"gpus": [{"index": i, "uuid": "GPU-%08d" % i} for i in range(gpus)]}))
    monkeypatch.setattr(fractioning, "Kube", lambda: None)
    monkeypatch.setattr(fractioning, "knobs", lambda kube: dict(knobs or {}))
    monkeypatch.setattr(fractioning, "Stop", lambda: FakeStop(loops))
    env = {"CUDA_MPS_PIPE_DIRECTORY": str(folder / "p"), "CUDA_MPS_LOG_DIRECTORY": str(folder / "l"),
           "MPS_CONFIG_PATH": str(folder / "etc" / "mps-control.toml"), "MPS_CONTROL_BINARY": str(MPS_BIN),
           "NVIDIA_STANDIN_GPUS": str(table), "NVIDIA_STANDIN_ROOT": str(folder / "root")}
    if limit is not None:
        env["MPSD_MEMORY_LIMIT"] = str(limit)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    try:
        return fractioning.mpsd([])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def json_lines(text):
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_mpsd_logs_as_the_fork_and_caps_the_default_namespace(monkeypatch, capfd):
    rc = run_mpsd(monkeypatch)
    out = capfd.readouterr().out
    assert rc == 0, out
    records = json_lines(out)
    by_msg = {r["msg"]: r for r in records}
    assert set(records[0]) == {"time", "level", "msg", "pipeDir", "logDir", "mpsBinary", "controlPort", "configPath",
                               "memacctAuditLog"}
    assert (records[0]["msg"], records[0]["level"], records[0]["controlPort"], records[0]["memacctAuditLog"]) == (
        "starting mpsd", "INFO", "3", True)
    assert by_msg["wrote MPS config"]["path"].endswith("mps-control.toml")
    start = by_msg["starting MPS daemon"]
    assert start["args"] == ["-p", "3", "-m", "-f", "-a", start["configPath"]]
    assert set(start) == {"time", "level", "msg", "binary", "args", "pipeDir", "logDir", "configPath"}
    cap = by_msg["capped the default MPS namespace as defence in depth"]
    assert (cap["server"], cap["namespace"], cap["activeThreadPercent"]) == ("shared", "default", 10)
    # The MPS daemon's own foreground lines reach the pod log too.
    assert "Adding server 'shared' [multiuser enabled]" in out
    assert "Namespace 'default' on server 'shared': active thread percentage 10" in out
    assert "mpsd shutdown complete" in by_msg


def test_mpsd_without_multiuser_lab_knob(monkeypatch, capfd):
    rc = run_mpsd(monkeypatch, knobs={"mpsd.multiuser": "false"})
    out = capfd.readouterr().out
    start = {r["msg"]: r for r in json_lines(out)}["starting MPS daemon"]
    assert "-m" not in start["args"] and "[multiuser enabled]" not in out and rc == 0


def test_mpsd_out_of_host_memory_exits_with_cuda_error_out_of_memory(monkeypatch, capfd):
    rc = run_mpsd(monkeypatch, limit=256 * 2 ** 20, gpus=8)
    out = capfd.readouterr().out
    assert rc == 1
    assert "creating the CUDA context on device 5 (GPU-00000005) failed: CUDA_ERROR_OUT_OF_MEMORY" in out
    last = json_lines(out)[-1]
    assert (last["level"], last["msg"]) == ("ERROR", "mpsd exiting with error")


def test_mpsd_with_enough_host_memory_starts(monkeypatch, capfd):
    rc = run_mpsd(monkeypatch, limit=2 ** 30, gpus=8)
    assert rc == 0 and "CUDA_ERROR_OUT_OF_MEMORY" not in capfd.readouterr().out


# ---------------------------------------------------------------- the chart
helm_python = pytest.importorskip("helm_python")


def render(values):
    with helm_python.Chart.load(str(FRACTIONING_CHART)) as loaded:
        out = loaded.render(values, name="gpu-fractioning", namespace="gpu-fractioning", is_install=True)
    objects = []
    for text in out.values():
        objects += [d for d in yaml.safe_load_all(text) if d]
    return objects


def find(objects, kind, name=None):
    return next(o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name))


@pytest.mark.parametrize("values, arg", [
    ({}, "--min-gpu-operator-version=v26.7.1"),
    ({"gpuOperator": {"minimumVersion": "v26.7.0"}}, "--min-gpu-operator-version=v26.7.0"),
    ({"gpuOperator": {"minimumVersion": ""}}, "--min-gpu-operator-version="),
], ids=["default-v26-7-1", "lowered", "empty-skips"])
def test_chart_passes_the_gpu_operator_minimum_to_the_operator(values, arg):
    operator = find(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert arg in operator["args"]


def test_chart_passes_mps_daemon_and_fractioning_agent_through_to_the_config():
    values = {"mpsDaemon": {"resources": {"limits": {"memory": "2Gi"}}, "recycleWhenIdle": True},
              "fractioningAgent": {"criSocketPath": "/run/k3s/containerd/containerd.sock", "logLevel": "debug"}}
    spec = find(render(values), "GpuFractioningConfig")["spec"]
    assert spec["mpsDaemon"] == values["mpsDaemon"]
    assert spec["fractioningAgent"] == values["fractioningAgent"]
    assert spec["metricsAgent"] == {"enabled": True}


def test_chart_defaults_render_an_empty_fractioning_agent_and_no_mps_daemon():
    spec = find(render({}), "GpuFractioningConfig")["spec"]
    assert spec["fractioningAgent"] == {} and "mpsDaemon" not in spec
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}


def test_chart_lets_the_operator_read_the_gpu_operator_version():
    roles = [o for o in render({}) if o["kind"] == "ClusterRole" and not o["metadata"]["name"].endswith("-daemon")]
    rules = {(tuple(r["apiGroups"]), tuple(r["resources"])): r["verbs"] for r in roles[0]["rules"]}
    assert "list" in rules[(("nvidia.com",), ("clusterpolicies",))]
    assert "list" in rules[(("operators.coreos.com",), ("clusterserviceversions",))]


def test_crd_keeps_the_mps_daemon_resources():
    crd = yaml.safe_load(next(FRACTIONING_CHART.glob("crds/*.yaml")).read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"limits", "requests"} <= set(spec["mpsDaemon"]["properties"]["resources"]["properties"])
    assert "resources" in spec["fractioningAgent"]["properties"]
