"""module_utils/gpu_holders.py: which pods and processes still hold a node's GPUs."""
import os

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import driver_upgrade as filters
from ansible_collections.smshare.kai.plugins.module_utils import gpu_holders as gh
from ansible_collections.smshare.kai.plugins.module_utils import mps

NODE = "gpu-01"
UID = "0f2c6e1a-3b4d-4e5f-8a9b-0c1d2e3f4a5b"


def pod(name, namespace="team-a", node=NODE, phase="Running", gpus=None, annotations=None, owner=True, **meta):
    container = {"name": "main", "resources": {"limits": {"nvidia.com/gpu": gpus}} if gpus is not None else {}}
    metadata = dict({"name": name, "namespace": namespace, "uid": "uid-" + name,
                     "annotations": annotations or {}}, **meta)
    if owner:
        metadata["ownerReferences"] = [{"kind": "ReplicaSet", "name": name + "-rs"}]
    return {"metadata": metadata, "spec": {"nodeName": node, "containers": [container]}, "status": {"phase": phase}}


@pytest.mark.parametrize("the_pod, why", [
    (pod("whole", gpus="1"), "requests nvidia.com/gpu"),
    (pod("half", annotations={"gpu-fraction": "0.5"}), "annotated gpu-fraction"),
    (pod("mem", annotations={"gpu-memory": "4096"}), "annotated gpu-memory"),
    (pod("bound", annotations={"nvidia.com/container.main.gpus.devices": "GPU-1"}),
     "bound to a GPU by the binder (gpus.devices)"),
    (pod("gpu-reservation-gpu-01-x7k2p", namespace="kai-resource-reservation", gpus="1", owner=False,
         annotations={"karpenter.sh/do-not-disrupt": "true"}),
     "KAI reservation pod, requests nvidia.com/gpu, annotated karpenter.sh/do-not-disrupt"),
])
def test_every_way_a_pod_holds_a_gpu_is_named(the_pod, why):
    rows = gh.holding_pods([the_pod], NODE)
    assert [r["why"] for r in rows] == [why]
    assert rows[0]["name"] == the_pod["metadata"]["name"] and rows[0]["kind"] == "pod"


@pytest.mark.parametrize("the_pod", [
    pod("cpu-only"),
    pod("zero", gpus="0"),
    pod("elsewhere", gpus="1", node="gpu-02"),
    pod("done", gpus="1", phase="Succeeded"),
    pod("failed", annotations={"gpu-fraction": "0.5"}, phase="Failed"),
    pod("empty-devices", annotations={"nvidia.com/container.main.gpus.devices": ""}),
])
def test_pods_that_hold_no_gpu_here_are_left_out(the_pod):
    assert gh.holding_pods([the_pod], NODE) == []


def test_the_action_fits_the_pod():
    rows = {r["name"]: r["action"] for r in gh.holding_pods([
        pod("gpu-reservation-gpu-01-a", namespace="kai-resource-reservation", gpus="1", owner=False),
        pod("bare", annotations={"gpu-fraction": "0.5"}, owner=False),
        pod("owned", gpus="1"),
        pod("leaving", gpus="1", deletionTimestamp="2026-12-03T10:00:00Z"),
    ], NODE)}
    assert "binder re-creates it" in rows["gpu-reservation-gpu-01-a"]
    assert "driver_upgrade_drain_force" in rows["bare"] and "kubectl delete pod -n team-a bare" in rows["bare"]
    assert "outside driver_upgrade_drain_pod_selectors" in rows["owned"]
    assert "terminating" in rows["leaving"]


def test_a_daemonset_pod_and_a_static_pod_are_told_apart():
    daemon = pod("exporter", gpus="1")
    daemon["metadata"]["ownerReferences"] = [{"kind": "DaemonSet", "name": "exporter"}]
    static = pod("static", gpus="1", owner=False, annotations={"kubernetes.io/config.mirror": "abc"})
    rows = {r["name"]: r["action"] for r in gh.holding_pods([daemon, static], NODE)}
    assert "the drain leaves DaemonSet pods" in rows["exporter"]
    assert "staticPodPath" in rows["static"]


@pytest.mark.parametrize("resource", ["nvidia.com/mig-1g.10gb", "nvidia.com/gpu.shared"])
def test_a_mig_slice_or_a_renamed_shared_gpu_counts(resource):
    the_pod = pod("slice")
    the_pod["spec"]["containers"][0]["resources"] = {"requests": {resource: "1"}}
    assert gh.holding_pods([the_pod], NODE)[0]["why"] == "requests " + resource


def test_a_finished_init_container_holds_nothing_but_a_sidecar_does():
    the_pod = pod("init")
    the_pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    the_pod["status"]["initContainerStatuses"] = [{"name": "warm", "state": {"terminated": {"exitCode": 0}}}]
    assert gh.holding_pods([the_pod], NODE) == []
    the_pod["spec"]["initContainers"][0]["restartPolicy"] = "Always"
    assert len(gh.holding_pods([the_pod], NODE)) == 1


def test_an_init_container_request_counts():
    the_pod = pod("init")
    the_pod["spec"]["initContainers"] = [{"name": "warm", "resources": {"requests": {"nvidia.com/gpu": 1}}}]
    assert gh.holding_pods([the_pod], NODE)[0]["why"] == "requests nvidia.com/gpu"


def fake_proc(root, pid, comm, targets, cgroup="0::/init.scope\n"):
    base = root / str(pid)
    (base / "fd").mkdir(parents=True)
    (base / "comm").write_text(comm + "\n")
    (base / "cmdline").write_bytes(comm.encode() + b"\0--flag\0")
    (base / "cgroup").write_text(cgroup)
    for number, target in enumerate(targets):
        os.symlink(target, base / "fd" / str(number))


def test_processes_with_an_nvidia_device_open_are_found_with_their_pod(tmp_path):
    fake_proc(tmp_path, 101, "nvidia-persiste", ["/dev/nvidiactl", "/dev/nvidia0"])
    fake_proc(tmp_path, 202, "python3", ["/dev/null", "/dev/nvidia0", "/dev/nvidia-uvm", "socket:[1234]"],
              cgroup="0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod%s.slice/cri-x\n"
              % UID.replace("-", "_"))
    fake_proc(tmp_path, 303, "bash", ["/dev/pts/0"])
    (tmp_path / "self").mkdir()   # not a PID: ignored
    found, unreadable = gh.open_devices(str(tmp_path))
    assert unreadable == 0
    assert [(p["pid"], p["comm"], p["devices"]) for p in found] == [
        (101, "nvidia-persiste", ["/dev/nvidia0", "/dev/nvidiactl"]),
        (202, "python3", ["/dev/nvidia-uvm", "/dev/nvidia0"])]
    assert found[1]["pod_uid"] == UID and found[1]["cmdline"] == "python3 --flag"
    named = pod("trainer", uid=UID)
    rows = gh.holding_processes(found, {"nvidia-persiste"}, [named])
    assert [r["name"] for r in rows] == ["pid 202 (python3)"]
    assert "in team-a/trainer" in rows[0]["why"] and rows[0]["action"] == "delete its pod, or let it finish"
    host = gh.holding_processes(found, set())[0]
    assert "add 'nvidia-persiste' to driver_upgrade_holders_allowed_processes" in host["action"]


def test_a_process_whose_files_cannot_be_read_is_counted_one_that_left_is_not(tmp_path, monkeypatch):
    (tmp_path / "404").mkdir()   # no fd folder: gone meanwhile
    fake_proc(tmp_path, 405, "other-user", ["/dev/nvidia0"])
    listdir = os.listdir

    def refusing(path):
        if path.endswith("405/fd"):
            raise PermissionError(13, "Permission denied", path)
        return listdir(path)
    monkeypatch.setattr(gh.os, "listdir", refusing)
    assert gh.open_devices(str(tmp_path)) == ([], 1)


def test_a_process_that_exits_while_read_is_no_holder(tmp_path):
    fake_proc(tmp_path, 55, "gone", ["/dev/nvidia0"])
    (tmp_path / "55" / "comm").unlink()
    assert gh.open_devices(str(tmp_path)) == ([], 0)


def test_a_pod_process_of_an_unknown_pod_keeps_its_uid(tmp_path):
    fake_proc(tmp_path, 7, "worker", ["/dev/nvidia1"], cgroup="12:devices:/kubepods/pod%s/abc\n" % UID)
    rows = gh.holding_processes(gh.open_devices(str(tmp_path))[0], set())
    assert rows[0]["why"] == "has /dev/nvidia1 open in pod uid " + UID


def test_only_the_pods_that_hold_a_gpu_are_rows():
    assert [r["name"] for r in gh.holding_pods([pod("a", gpus="1"), pod("b")], NODE)] == ["a"]


# ---------------------------------------------------------------- MPS clients
CONTAINER_ID = "3f9c2a7be41d08c6aa51f0e2d7b94c13e8f6a0b2c5d7e9f1a3b5c7d9e1f3a5b7"


def test_an_mps_client_is_named_with_the_pod_whose_namespace_it_uses():
    """The fork's mpsd names a container's namespace after its ID: that names the pod."""
    owner = pod("vllm-0", annotations={"gpu-fraction": "0.5"})
    owner["status"]["containerStatuses"] = [{"name": "main", "containerID": "containerd://" + CONTAINER_ID}]
    namespace = mps.fork_namespace_name(CONTAINER_ID)
    [row] = gh.mps_client_rows([{"pid": 3167082, "server": "shared", "device": "GPU-1", "namespace": namespace,
                                 "command": "VLLM::EngineCore"}], [owner, pod("other")])
    assert row["kind"] == "mps_client" and row["name"] == "MPS client pid 3167082 (VLLM::EngineCore)"
    assert row["why"] == "attached to namespace %s of server shared, in pod team-a/vllm-0 (container main)" % namespace
    assert row["action"] == "delete its pod, or let it finish"


def test_an_mps_client_of_no_pod_is_told_how_to_detach():
    [v3, legacy] = gh.mps_client_rows([{"pid": 42, "server": "shared", "device": "GPU-1", "namespace": "default",
                                        "command": "python3"}, {"pid": 43, "server_pid": 40}])
    assert v3["why"] == "attached to namespace default of server shared"
    assert "nvidia-cuda-mps-control -p 3 client terminate 42" in v3["action"]
    assert legacy["name"] == "MPS client pid 43" and legacy["why"] == "attached to server pid 40"
    assert "echo terminate_client 40 43 | nvidia-cuda-mps-control" in legacy["text"]


def test_no_client_no_row():
    assert gh.mps_client_rows([], [pod("a")]) == [] and filters.driver_upgrade_mps_holders([]) == []


@pytest.mark.parametrize("clients, pods", [({"pid": 1}, None), ([], {"items": []})])
def test_the_mps_filter_refuses_what_is_not_a_list(clients, pods):
    with pytest.raises(AnsibleFilterError, match="driver_upgrade_mps_holders"):
        filters.driver_upgrade_mps_holders(clients, pods)
