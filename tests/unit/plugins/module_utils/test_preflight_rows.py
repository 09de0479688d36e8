# Apache-2.0
"""The preflight rows of the guide's "Cluster and Nodes" table written in Python
(module_utils/preflight_rows.py): each case names the rule it checks."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import preflight_rows as rows

PRESENT = {"nvidia.com/gpu.present": "true"}


def node(name, labels=None, gpus=None, capacity=None):
    status = {}
    if gpus is not None:
        status["allocatable"] = {"nvidia.com/gpu": str(gpus)}
    if capacity is not None:
        status["capacity"] = {"nvidia.com/gpu": str(capacity)}
    return {"metadata": {"name": name, "labels": dict(labels or {})}, "status": status}


def gpu_node(name, count=8, memory="81920", present=True, **extra):
    labels = {"nvidia.com/gpu.count": str(count)}
    if present:
        labels.update(PRESENT)
    if memory is not None:
        labels["nvidia.com/gpu.memory"] = memory
    labels.update(extra)
    return node(name, labels, gpus=count)


CPU = node("cpu-1", {"kubernetes.io/os": "linux"})


# ---------------------------------------------------------------- objects
@pytest.mark.parametrize("text, expected", [
    ("1Gi", 2 ** 30), ("256Mi", 256 * 2 ** 20), ("1073741824", 2 ** 30), ("1.5Gi", 3 * 2 ** 29),
    ("512M", 512 * 10 ** 6), (" 2Gi ", 2 * 2 ** 30),
], ids=["binary-suffix", "mebibytes", "plain-bytes", "decimal-value", "decimal-suffix", "whitespace"])
def test_quantity_bytes(text, expected):
    assert rows.quantity_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "1 Gi", "-1Gi", "1GB", "lots", None], ids=[
    "empty", "space-before-suffix", "negative", "unknown-suffix", "word", "none"])
def test_quantity_bytes_refuses(text):
    with pytest.raises(ValueError):
        rows.quantity_bytes(text)


@pytest.mark.parametrize("selector, expected", [
    ("nvidia.com/gpu.present=true", {"nvidia.com/gpu.present": "true"}),
    ("a=b, c=d", {"a": "b", "c": "d"}), ("", {}),
], ids=["one-label", "two-labels", "empty-selects-all"])
def test_parse_selector(selector, expected):
    assert rows.parse_selector(selector) == expected


@pytest.mark.parametrize("selector", ["a!=b", "a", "a in (b)", "a==b"], ids=[
    "not-equal", "exists", "set-based", "double-equal"])
def test_parse_selector_refuses_what_it_cannot_match(selector):
    with pytest.raises(ValueError):
        rows.parse_selector(selector)


@pytest.mark.parametrize("obj, expected", [
    (gpu_node("a", 8), 8), (node("b", gpus=4), 4), (node("c", capacity=2), 2),
    (node("d", {"nvidia.com/gpu.count": "16"}, gpus=8), 16), (CPU, 0), (node("e", {"nvidia.com/gpu.count": "x"}), 0),
], ids=["gfd-count", "allocatable", "capacity", "gfd-count-wins", "no-gpus", "garbage-count"])
def test_gpu_count(obj, expected):
    assert rows.gpu_count(obj) == expected


# ---------------------------------------------------------------- row 4
@pytest.mark.parametrize("nodes, status, found_parts", [
    ([gpu_node("a"), gpu_node("b"), CPU], "PASS", ["on all 2 GPU nodes"]),
    ([gpu_node("a"), gpu_node("b", present=False)], "FAIL", ["missing on b (8 nvidia.com/gpu)"]),
    ([node("gfd-only", {"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})], "FAIL", ["missing on gfd-only"]),
    ([node("plugin-only", gpus=4)], "FAIL", ["missing on plugin-only (4 nvidia.com/gpu)"]),
], ids=["every-gpu-node-labelled", "gpu-node-without-label-is-named", "gfd-labels-mark-a-gpu-node",
        "device-plugin-capacity-marks-a-gpu-node"])
def test_gpu_present_rows(nodes, status, found_parts):
    [row] = rows.gpu_present_rows(nodes)
    assert row["status"] == status
    for part in found_parts:
        assert part in row["found"]
    if status == "FAIL":
        assert "reports no error" in row["fix"] and "kubectl label node" in row["fix"]


def test_gpu_present_rows_leave_a_cluster_without_gpu_nodes_to_the_gpu_nodes_row():
    assert rows.gpu_present_rows([CPU]) == [] and rows.gpu_present_rows([]) == []


def test_gpu_present_rows_follow_the_configured_selector():
    [row] = rows.gpu_present_rows([gpu_node("a", **{"pool": "gpu"})], "pool=gpu,nvidia.com/gpu.present=true")
    assert row["status"] == "PASS" and row["check"] == "label pool=gpu,nvidia.com/gpu.present=true"


# ---------------------------------------------------------------- row 5
@pytest.mark.parametrize("nodes, status, found_parts", [
    ([gpu_node("a"), gpu_node("b", memory="40960"), CPU], "PASS", ["40960, 81920 on all 2 GPU nodes"]),
    ([gpu_node("a"), gpu_node("smshare-lab-node-01", memory=None)], "FAIL", ["smshare-lab-node-01: missing"]),
    ([gpu_node("a", memory="80GiB")], "FAIL", ["a: '80GiB' is not a whole number of MiB"]),
    ([gpu_node("a", memory="80")], "FAIL", ["a: 80 is too small for MiB"]),
    ([gpu_node("a", memory="")], "FAIL", ["a: missing"]),
    ([node("unlabelled", gpus=8)], "FAIL", ["unlabelled: missing"]),
], ids=["mib-on-every-gpu-node", "missing-label-names-the-node", "not-a-number", "gb-not-mib", "empty-value",
        "gpu-node-without-any-label"])
def test_gpu_memory_rows(nodes, status, found_parts):
    [row] = rows.gpu_memory_rows(nodes)
    assert row["status"] == status, row
    for part in found_parts:
        assert part in row["found"]
    if status == "FAIL":
        assert "node does not include nvidia.com/gpu.memory label" in row["fix"]
        assert "GPU Feature Discovery" in row["fix"]


def test_gpu_memory_rows_none_without_gpu_nodes():
    assert rows.gpu_memory_rows([CPU]) == []


# ---------------------------------------------------------------- row 8
def plan(limit, limit_mib, auto, gpus, node_name, required_mib):
    return {"limit": limit, "limit_mib": limit_mib, "auto": auto, "gpus": gpus, "node": node_name,
            "required_mib": required_mib}


@pytest.mark.parametrize("nodes, limit, expected", [
    ([gpu_node("a", 8)], None, plan(None, 1024, False, 8, "a", 400)),
    ([gpu_node("a", 16)], None, plan(None, 1024, False, 16, "a", 800)),
    ([gpu_node("a", 8), gpu_node("dense", 24)], None, plan("1536Mi", 1536, True, 24, "dense", 1200)),
    ([gpu_node("a", 32)], None, plan("2Gi", 2048, True, 32, "a", 1600)),
    ([gpu_node("a", 8)], "256Mi", plan("256Mi", 256, False, 8, "a", 400)),
    ([CPU], None, plan(None, 1024, False, 0, None, 0)),
], ids=["8-gpus-keep-the-charts-1gi", "16-gpus-still-fit-1gi", "denser-node-raises-64mi-per-gpu",
        "32-gpus-2gi", "a-given-limit-is-kept", "no-gpu-nodes"])
def test_mpsd_memory_limit(nodes, limit, expected):
    assert rows.mpsd_memory_limit(nodes, limit=limit) == expected


@pytest.mark.parametrize("nodes, limit, status, parts", [
    ([gpu_node("a", 8)], None, "PASS", ["1Gi (the chart's default)", ">= 400Mi (50 MiB x 8 GPUs on a)"]),
    ([gpu_node("a", 8)], "256Mi", "FAIL", [
        "256Mi (smshare_mpsd_memory_limit)", "node a has 8 GPUs", "set smshare_mpsd_memory_limit to 512Mi or more",
        "CUDA_ERROR_OUT_OF_MEMORY"]),
    ([gpu_node("a", 8)], "400Mi", "PASS", ["400Mi"]),
    ([gpu_node("a", 32)], None, "PASS", ["2Gi (raised by the gpu_fractioning role"]),
    ([gpu_node("a", 32)], "1Gi", "FAIL", ["node a has 32 GPUs", "to 2Gi or more"]),
    ([gpu_node("a", 8)], "a lot", "FAIL", ["is not a Kubernetes quantity"]),
], ids=["default-covers-8-gpus", "256mi-is-too-small-for-8-gpus", "exactly-50mi-per-gpu", "auto-raised-passes",
        "given-1gi-too-small-for-32-gpus", "unparsable-limit"])
def test_mpsd_memory_rows(nodes, limit, status, parts):
    [row] = rows.mpsd_memory_rows(nodes, limit=limit)
    assert row["status"] == status, row
    text = row["found"] + " " + row["wanted"] + " " + row["fix"]
    for part in parts:
        assert part in text, (part, row)


def test_mpsd_memory_rows_name_the_knob_they_are_given():
    [row] = rows.mpsd_memory_rows([gpu_node("a", 8)], limit="100Mi", knob="gpu_fractioning_mpsd_memory_limit")
    assert "set gpu_fractioning_mpsd_memory_limit to 512Mi" in row["fix"]


def test_mpsd_memory_rows_none_without_gpu_nodes():
    assert rows.mpsd_memory_rows([CPU]) == []


# ---------------------------------------------------------------- row 1: MPS v3
V3_OK = {"installed": True, "v3_supported": True, "v3_missing_verbs": []}


@pytest.mark.parametrize("result, managed, status, found", [
    (V3_OK, False, "PASS", "supported"),
    ({"installed": True, "v3_supported": False, "v3_missing_verbs": ["create", "delete", "get", "list", "set"]},
     False, "FAIL", "missing create, delete, get, list, set"),
    ({"installed": True, "v3_supported": False, "v3_missing_verbs": ["get"]}, True, "PENDING", "missing get"),
    ({"installed": False, "v3_supported": None, "failure": "nvidia_cuda_mps_control_missing"}, True, "PENDING",
     "not installed"),
    ({"installed": False, "v3_supported": None}, False, "FAIL", "not installed"),
    ({}, False, "FAIL", "unknown: nvidia-cuda-mps-control not found"),
], ids=["r615-lists-the-five-verbs", "older-driver-has-no-namespace-verbs", "driver-play-upgrades-next",
        "tool-installed-by-the-driver-play-next", "tool-missing-without-a-driver-play", "module-did-not-run"])
def test_mps_v3_row(result, managed, status, found):
    row = rows.mps_v3_row(result, managed)
    assert (row["status"], row["found"]) == (status, found), row
    assert row["wanted"] == "namespace --help lists create, delete, get, list, set"


HELP = ("Usage: nvidia-cuda-mps-control -p 3 namespace <verb> [options]\n"
        "Verbs:\n  create  Create a namespace\n  delete  Delete a namespace\n  get  Read a field\n"
        "  list  List namespaces\n  set  Set a namespace's active thread percentage\n")


def exec_result(pod, node_name, rc=0, stdout=HELP, stderr="", **extra):
    return dict({"item": {"pod": pod, "node": node_name, "container": "nvidia-driver-ctr"}, "rc": rc,
                 "stdout": stdout, "stderr": stderr}, **extra)


@pytest.mark.parametrize("results, managed, expected", [
    ([exec_result("drv-a", "gpu-1"), exec_result("drv-b", "gpu-2")], False,
     [("PASS", "MPS v3 (namespace verbs) on gpu-1 (gpu-operator/drv-a)"),
      ("PASS", "MPS v3 (namespace verbs) on gpu-2 (gpu-operator/drv-b)")]),
    ([exec_result("drv-a", "gpu-1", rc=1, stdout="", stderr="Unknown option: -p\n")], False,
     [("FAIL", "MPS v3 (namespace verbs) on gpu-1 (gpu-operator/drv-a)")]),
    ([exec_result("drv-a", "gpu-1", stdout="create delete list\n")], False,
     [("FAIL", "MPS v3 (namespace verbs) on gpu-1 (gpu-operator/drv-a)")]),
    ([{"item": {"pod": "drv-a", "node": "gpu-1"}, "failed": True, "msg": "Forbidden"}], False,
     [("FAIL", "MPS v3 (namespace verbs) on gpu-1 (gpu-operator/drv-a)")]),
    ([], True, [("PENDING", "MPS v3 (namespace verbs)")]),
    ([], False, [("FAIL", "MPS v3 (namespace verbs)")]),
], ids=["driver-container-offers-v3", "older-driver-container-refuses-p-3", "help-lacks-get-and-set",
        "exec-refused", "no-driver-pod-yet-gpu-operator-play-next", "no-driver-pod"])
def test_mps_v3_exec_rows(results, managed, expected):
    found = rows.mps_v3_exec_rows(results, managed=managed)
    assert [(r["status"], r["check"]) for r in found] == expected
    if expected[0][0] == "FAIL" and results and results[0].get("rc") is not None:
        assert "615.71.09" in found[0]["fix"]


def test_mps_v3_exec_rows_name_the_missing_verbs():
    [row] = rows.mps_v3_exec_rows([exec_result("drv-a", "gpu-1", stdout="create delete list\n")])
    assert row["found"] == "missing get, set"


def test_driver_pods_are_the_running_pods_of_the_driver_daemonset():
    ds = {"metadata": {"name": "nvidia-driver-daemonset", "uid": "ds-1"}}

    def pod(name, owner="ds-1", phase="Running", deleting=False):
        meta = {"name": name, "ownerReferences": [{"uid": owner}]}
        if deleting:
            meta["deletionTimestamp"] = "now"
        containers = [{"name": "nvidia-driver-ctr"}, {"name": "sidecar"}]
        return {"metadata": meta, "spec": {"nodeName": "n-" + name, "containers": containers},
                "status": {"phase": phase}}
    pods = [pod("a"), pod("b", owner="other"), pod("c", phase="Pending"), pod("d", deleting=True), pod("e")]
    assert rows.driver_pods(pods, [ds]) == [{"pod": "a", "node": "n-a", "container": "nvidia-driver-ctr"},
                                            {"pod": "e", "node": "n-e", "container": "nvidia-driver-ctr"}]
    assert rows.driver_pods(pods, []) == []


# ---------------------------------------------------------------- row 7
@pytest.mark.parametrize("gpu, managed, method, expected", [
    ({"nvswitch_count": 0, "fabricmanager_running": False}, False, "host", ("PASS", "not needed (no NVSwitch)")),
    ({"nvswitch_count": 6, "fabricmanager_running": True}, False, "host",
     ("PASS", "6 NVSwitches, nvidia-fabricmanager active")),
    ({"nvswitch_count": 6, "fabricmanager_running": False}, False, "host",
     ("FAIL", "6 NVSwitches, nvidia-fabricmanager inactive")),
    ({"nvswitch_count": 6, "fabricmanager_running": False}, True, "host",
     ("PENDING", "6 NVSwitches, nvidia-fabricmanager inactive")),
    ({"nvswitch_count": 6, "fabricmanager_running": None}, False, "host",
     ("FAIL", "6 NVSwitches, nvidia-fabricmanager state unknown")),
    ({"nvswitch_count": None}, False, "host", ("FAIL", "unknown: /sys/bus/pci/devices could not be read")),
    ({"failed": True, "msg": "nvidia-smi not found"}, True, "host", ("PENDING", "unknown (nvidia-smi not found)")),
    ({"failed": True, "msg": "nvidia-smi not found"}, False, "host", ("FAIL", "unknown (nvidia-smi not found)")),
], ids=["no-nvswitch-no-fabric-manager", "hgx-with-fabric-manager-active", "hgx-fabric-manager-inactive",
        "hgx-driver-play-starts-it-next", "no-systemctl", "sysfs-unreadable", "no-driver-yet-driver-play-next",
        "no-driver"])
def test_fabric_manager_rows(gpu, managed, method, expected):
    [row] = rows.fabric_manager_rows(gpu, managed, method)
    assert (row["status"], row["found"]) == expected, row
    if row["status"] == "FAIL" and "inactive" in row["found"]:
        assert "systemctl enable --now nvidia-fabricmanager" in row["fix"]


def test_fabric_manager_rows_leave_the_gpu_operator_driver_container_alone():
    assert rows.fabric_manager_rows({"nvswitch_count": 6, "fabricmanager_running": False}, False,
                                    "gpu_operator") == []


# ---------------------------------------------------------------- "Adjust": k3s/RKE2
@pytest.mark.parametrize("present, path, expected", [
    (False, "/run/containerd/containerd.sock", []),
    (True, "/run/k3s/containerd/containerd.sock", [("PASS", "")]),
    (True, "/run/containerd/containerd.sock",
     [("FAIL", "set smshare_cri_socket_path=/run/k3s/containerd/containerd.sock (fractioningAgent.criSocketPath)")]),
], ids=["not-k3s", "k3s-socket-configured", "k3s-proposes-its-socket"])
def test_k3s_rows(present, path, expected):
    found = rows.k3s_rows(present, path)
    assert [(r["status"], r["fix"]) for r in found] == expected


# ---------------------------------------------------------------- readings the Jinja made
# (the whole rows of each task file are pinned against the role's former Jinja in
# tests/unit/plugins/filter/test_preflight_rows_recorded.py)
@pytest.mark.parametrize("version, floor, expected", [
    ("13.4", "13.4", True), ("13.10", "13.4", True), ("13.0", "13.4", False), ("2.0.4", "2.0", True),
    ("1.20.0", 1.2, True), ("26.7.0", "26.7.1", False), ("", "1", False), (None, "1", False), ("1.2", "", False),
    ("1.2a", "1.2.0", False),
], ids=["equal", "minor-as-a-number", "lower", "longer", "float-floor", "patch-lower", "empty", "none", "no-floor",
        "incomparable"])
def test_at_least(version, floor, expected):
    assert rows.at_least(version, floor) is expected


@pytest.mark.parametrize("value, expected", [
    ("8", 8), (8, 8), ("2.5", 2), (None, 0), ("x", 0), (" 615", 615),
], ids=["text", "number", "decimal-text", "none", "word", "space"])
def test_whole_number(value, expected):
    assert rows.whole_number(value) == expected


@pytest.mark.parametrize("stdout, expected", [
    ("containerd github.com/containerd/containerd/v2 v2.0.4 1a43cb6", "2.0.4"),
    ("containerd containerd.io 1.7.27 05044ec", "1.7.27"), ("", ""), (None, ""),
], ids=["v2", "docker-package", "nothing-printed", "no-output"])
def test_containerd_version(stdout, expected):
    assert rows.containerd_version(stdout) == expected


def test_slurped_text():
    assert rows.slurped_text({"content": "dmVyc2lvbiA9IDIK"}) == "version = 2\n"
    assert rows.slurped_text({"failed": True, "msg": "file not found"}) == ""
    assert rows.slurped_text(None) == ""


@pytest.mark.parametrize("config, version, enabled, reason", [
    ('version = 3\n[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n', "2.0.4", True, "disable = false"),
    ('version = 2\n[plugins."io.containerd.nri.v1.nri"]\n  disable = true\n', "2.0.4", False, "disable = true"),
    ('version = 3\ndisabled_plugins = ["io.containerd.nri.v1.nri"]\n', "2.1.0", False, "disabled_plugins"),
    ("version = 3\n", "containerd://2.0.4", True, "by default"),
    ("", None, True, "by default (containerd 2.x)"),
    ("version = 2\n", "v1.7.22", False, "leaves NRI off"),
    ("version = [\n", "2.0.0", False, "not valid TOML"),
])
def test_containerd_nri(config, version, enabled, reason):
    result = rows.containerd_nri(config, version)
    assert result["enabled"] is enabled
    assert reason in result["reason"]


def test_containerd_nri_reports_the_socket_path():
    config = '[plugins."io.containerd.nri.v1.nri"]\n  disable = false\n  socket_path = "/x/nri.sock"\n'
    assert rows.containerd_nri(config)["socket_path"] == "/x/nri.sock"
    assert rows.containerd_nri("")["socket_path"] == "/var/run/nri/nri.sock"


@pytest.mark.parametrize("minimum, floors, expected", [
    ("v26.7.1", {"container-toolkit": "1.20.1"}, {"gpu-operator": "26.7.1", "container-toolkit": "1.20.1"}),
    ("26.8", {}, {"gpu-operator": "26.8"}), ("", {"k8s-device-plugin": "0.21"}, {"k8s-device-plugin": "0.21"}),
], ids=["leading-v-dropped", "without-v", "empty-skips-the-operator"])
def test_stack_floors(minimum, floors, expected):
    found = rows.stack_floors(minimum, floors)
    assert found == expected and list(found) == list(expected)


def test_rbac_rows_read_a_review_without_an_answer_as_no():
    [row] = rows.rbac_rows([{"item": {"resource": "namespaces", "group": ""}, "result": None}], "/k")
    assert (row["found"], row["status"]) == ("no", "FAIL")
    assert row["fix"] == "grant create on namespaces to the identity of /k (cluster-admin installs the charts)"


def test_node_rows_take_the_last_ready_condition():
    node = {"metadata": {"name": "n"}, "status": {
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "Ready", "status": "True"}],
        "nodeInfo": {"containerRuntimeVersion": "containerd://2.0.4"}, "allocatable": {"nvidia.com/gpu": "1"}}}
    [row] = rows.node_rows({"resources": [node]}, "a=b", "2.0")
    assert (row["status"], row["found"], row["fix"]) == ("PASS", "Ready=True, containerd://2.0.4, 1 nvidia.com/gpu", "")


# ---------------------------------------------------------------- GPU memory enforcement
# (mode, the GPU Operator floor) -> the row said plainly (None: memory is enforced, or nothing is known)
MEMORY = [
    ("nvfractions", "NvFractions", "v26.7.1", None),
    ("nvfractions_newer_floor", "NvFractions", "v26.8", None),
    ("nvfractions_floor_skipped", "NvFractions", "", None),
    ("no_mode", None, "v26.7.1", None),
    ("non_memory_enforced", "NonMemoryEnforced", "v26.7.1",
     ("NonMemoryEnforced: GPU memory is not enforced", ["may see and use more GPU memory than requested",
                                                        "smshare_gpu_sharing_mode: NvFractions",
                                                        "smoke_test_greedy_neighbour"])),
    ("nvfractions_below_the_hook", "NvFractions", "v26.7.0",
     ("NvFractions with GPU Operator v26.7.0: the memory cap rests on CUDA_MPS_PINNED_DEVICE_MEM_LIMIT alone",
      ["no memory-limit hook", "raise or remove its own limit", "v26.7.1 or newer"])),
    ("hamicore", "HamiCore", "v26.7.1",
     ("HamiCore: GPU memory is enforced only by HAMi-core, which this collection does not install",
      ["kai-resource-isolator"])),
    ("disabled", "Disabled", "v26.7.1", ("Disabled: no GPU sharing (fractional pods are refused)", ["NvFractions"])),
]


@pytest.mark.parametrize("mode, minimum, expected", [c[1:] for c in MEMORY], ids=[c[0] for c in MEMORY])
def test_a_sharing_mode_that_does_not_enforce_memory_is_said_plainly(mode, minimum, expected):
    found = rows.memory_enforcement_rows(mode, minimum)
    if expected is None:
        assert found == []
        return
    [row] = found
    assert (row["check"], row["status"], row["found"]) == ("GPU memory enforcement", "WARN", expected[0])
    assert row["wanted"] == "pods held to their GPU memory (NvFractions, GPU Operator >= v26.7.1)"
    for words in expected[1]:
        assert words in row["fix"], (words, row["fix"])


def test_the_warning_ends_the_cluster_table_and_fails_nothing():
    settings = {"kubeconfig": "/k", "runtime_class": "nvidia", "gpu_node_selector": "nvidia.com/gpu.present=true",
                "min_containerd_version": "2.0", "gpu_stack_floors": {}, "driver_method": "host",
                "gpu_operator_namespace": "gpu-operator", "driver_daemonset": "nvidia-driver-daemonset",
                "driver_managed": True}
    reads = {"runtime_class": {"resources": [{"handler": "nvidia"}]}, "nodes": {"resources": []}}
    plain = rows.cluster_rows(reads, settings, {})
    warned = rows.cluster_rows(reads, dict(settings, gpu_sharing_mode="NonMemoryEnforced",
                                           gpu_operator_minimum="v26.7.1"), {})
    assert warned[:-1] == plain and warned[-1]["status"] == "WARN"
    ok = [rows.row("a", "x", "y", "PASS")]
    verdict = rows.verdict(ok + warned[-1:], "ctl")
    assert verdict["ok"] and verdict["failed"] == [] and verdict["warnings"] == warned[-1:]
    assert verdict["summary"].startswith("1 rows passed ; WARNING GPU memory enforcement: NonMemoryEnforced: GPU "
                                         "memory is not enforced: KAI places fractional pods")
    assert rows.verdict(ok, "ctl")["summary"] == "1 rows passed "   # unchanged without a warning
