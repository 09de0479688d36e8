"""The smoke test on the lab's GPU data plane (stand-ins: lab/standin/charts/CONTRACT.md,
"The GPU data plane"), on the directory's one converge (conftest.py), in file order:

site.yml's last play, the smoke test, passed on the node -> the module alone:
every check passes, reports written, no pod left -> each misbehaviour knob fails its check and only that one -> the
greedy neighbour is held to its caps, and each enforcement knob fails it naming what is missing -> pods that cannot
be placed or cannot start are diagnosed (unknown queue, non-leaf queue, another
scheduler, a cordoned node) -> an interrupted run deletes its pods; a killed one leaves them
and the next run removes them first -> last, a reservation pod without the
nvidia RuntimeClass is diagnosed.
"""
import contextlib
import json
import os
import signal
import subprocess
import time

import pytest
import yaml

from cluster_helpers import knob, lab_vars
from lab_helpers import describe, signal_tree
from registry_state import unreadable

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]

MODULE = "tests/integration/cluster/playbooks/smoke_module.yml"
NAMESPACE = "default"
SELECTOR = "app.kubernetes.io/managed-by=smshare.kai.fraction_smoke_test"


def smoke(lab, **case):
    """The module once; its result."""
    started = time.monotonic()
    out = lab.state_dir / ("smoke-result-%d.json" % os.getpid())
    out.unlink(missing_ok=True)
    proc = lab.playbook(MODULE, extra_vars={"smoke": case, "smoke_out": str(out)})
    assert proc.returncode == 0 and out.is_file(), describe(proc)
    result = json.loads(out.read_text())
    out.unlink()
    assert "passed" in result or "failure" in result, "the module gave no result of its own:\n" + describe(proc)
    print("\n[smoke] %s: %.0f s" % (case or "happy path", time.monotonic() - started))
    return result


def our_pods(lab):
    out = lab.kubectl("-n", NAMESPACE, "get", "pods", "-l", SELECTOR, "-o", "name", check=False).stdout
    return out.split()


def failed_checks(result):
    return sorted(c["check"] for c in result.get("checks", []) if not c["passed"])


def test_site_ends_with_the_smoke_test_passing(lab, converged):
    out = converged.stdout
    assert "Prove the GPU fractions are enforced" in out
    assert "The smoke test passed on %s" % lab.kube_nodes[0] in out
    assert "54" in out   # deviceQuery's multiprocessors in the node's table
    assert our_pods(lab) == []
    reports = lab.state_dir / "smoke"
    assert (reports / ("smoke-%s.xml" % lab.kube_nodes[0])).is_file()


def test_check_mode_of_the_play_creates_nothing(lab, converged):
    proc = lab.playbook("site.yml", "--tags", "smoke", "--check")
    assert proc.returncode == 0, describe(proc)
    assert "changed=0" in proc.stdout.split("PLAY RECAP")[-1]
    assert our_pods(lab) == []


def test_module_happy_path(lab, converged, tmp_path):
    md, xml = str(tmp_path / "smoke.md"), str(tmp_path / "smoke.xml")
    result = smoke(lab, report_markdown=md, report_junit=xml)
    assert result.get("passed") is True, result.get("msg")
    assert failed_checks(result) == []
    assert [c["check"] for c in result["checks"]] == ["binder", "injection", "mps", "memory", "sm_share"]
    binder = result["checks"][0]
    lab_vars = yaml.safe_load((lab.state_dir / "inventory" / "group_vars" / "smshare_lab" / "lab.yml").read_text())
    assert binder["gpu"] in lab_vars["smshare_lab_node_tier"]["gpu_uuids"]
    sm = result["checks"][-1]["evidence"]
    assert sm["devicequery"]["multiprocessors"] == 54 and sm["gpu_sm_count"] == 108
    # the guide's pass conditions on the lab's A100-80GB (nvidia.com/gpu.memory 81920)
    injection = result["checks"][1]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=50" in injection["message"]
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=40448M" in injection["message"]   # (81920 - 1024) x 0.5
    mps_check = result["checks"][2]
    assert all(row["namespace"].startswith("kai_") and row["active_thread_percentage"] == 50.0
               for row in mps_check["evidence"]["pods"].values())
    assert "default at 10.00" in mps_check["message"]
    memory = result["checks"][3]["evidence"]
    assert all(v["memory_total_mib"] == [40448] for v in memory.values())
    assert result["changed"] is False
    assert os.path.isfile(md) and os.path.isfile(xml)
    assert our_pods(lab) == []


# Each knob fails its check with the guide's pass condition in the message. fractiond
# not registered with NRI adjusts nothing: no variables, no MPS namespace, no memory cap.
@pytest.mark.parametrize("key, checks, sm, words", [
    ("fractiond.wrong-device", ["injection"], False, "but the binder chose"),
    ("fractiond.unregistered", ["injection", "memory", "mps"], False,
     "no CUDA_MPS_* variable at all: fractiond did not adjust the container (not registered with NRI"),
    ("driver.memory-uncapped", ["memory"], False, "memory not capped"),
    ("mps.ignore-cap", ["sm_share"], True, "the cap is not enforced"),
])
def test_each_misbehaviour_fails_its_check(lab, converged, key, checks, sm, words):
    knob(lab, key, "true")
    try:
        result = smoke(lab, measure_sm_share=sm)
    finally:
        knob(lab, key)
    assert result.get("failure") == "checks_failed", result.get("msg")
    assert failed_checks(result) == checks, result.get("msg")
    assert "check %s" % checks[0] in result["msg"] and lab.kube_nodes[0] in result["msg"] and words in result["msg"]
    assert our_pods(lab) == []


# The notes' "test what a greedy neighbour can do": a pod asking for every SM and dropping its own pinned memory
# limit beside one that keeps to its share (check greedy, opt-in); held on the lab, and each enforcement the
# stand-ins model turned off fails it naming that enforcement (lab/standin/CONTRACT.md, "The greedy neighbour").
# Three module runs, deviceQuery left out (the probe measures the SMs).
@pytest.mark.parametrize("key, failed, words", [
    (None, [], None),
    ("driver.memory-uncapped", ["greedy", "memory"], "GPU memory cap not enforced"),
    ("mps.ignore-cap", ["greedy"], "SM cap not enforced"),
])
def test_the_greedy_neighbour_is_held_and_each_enforcement_knob_fails_it(lab, converged, key, failed, words):
    if key:
        knob(lab, key, "true")
    try:
        result = smoke(lab, measure_sm_share=False, greedy_neighbour=True)
    finally:
        if key:
            knob(lab, key)
    assert our_pods(lab) == []
    greedy = [c for c in result.get("checks", []) if c["check"] == "greedy"]
    assert greedy, result.get("msg")
    evidence = greedy[0]["evidence"]
    if key is None:
        assert result.get("passed") is True, result.get("msg")
        assert [c["check"] for c in result["checks"]] == ["binder", "injection", "mps", "memory", "greedy"]
        assert evidence["greedy"]["asked"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "100"
        assert evidence["greedy"]["multiprocessors"] == evidence["neighbour"]["multiprocessors"] == 54
        assert evidence["greedy"]["cap_mib"] == 40448   # (81920 - 1024) x 0.5, read from fractiond's variables
        assert [a["result"] for a in evidence["greedy"]["allocations"]] == ["CUDA_SUCCESS", "CUDA_ERROR_OUT_OF_MEMORY"]
        assert evidence["neighbour"]["allocations"][0]["ok"]
        assert greedy[0]["gpu"] in lab_vars(lab)["smshare_lab_node_tier"]["gpu_uuids"]   # one GPU, both pods
        return
    assert result.get("failure") == "checks_failed", result.get("msg")
    assert failed_checks(result) == failed, result.get("msg")
    assert "check greedy" in result["msg"] and words in result["msg"] and lab.kube_nodes[0] in result["msg"]
    other = "SM cap not enforced" if words.startswith("GPU memory") else "GPU memory cap not enforced"
    assert other not in greedy[0]["message"]


def test_a_binder_that_does_not_bin_pack_and_an_older_fractiond_still_pass_with_what_they_did(lab, converged):
    """Pods on two GPUs: a warning naming both (the guide: the UUIDs should match); the plural memory
    variables of kai-gpu-fractioning @ 0ee10b42: accepted, the spelling reported."""
    knob(lab, "kai-binder.split-gpus", "true")
    knob(lab, "fractiond.memory-env-plural", "true")
    try:
        result = smoke(lab, measure_sm_share=False)
    finally:
        knob(lab, "kai-binder.split-gpus")
        knob(lab, "fractiond.memory-env-plural")
    assert result.get("passed") is True, result.get("msg")
    binder = result["checks"][0]
    assert binder["gpu"] is None and "different GPUs" in binder["warnings"][0] and "bin-packs" in binder["warnings"][0]
    assert "NVIDIA_GPU_MEMORY_LIMITS" in result["checks"][1]["message"]
    assert our_pods(lab) == []


def test_a_node_without_the_gpu_memory_label_is_named(lab, converged):
    """The binder cannot size the cap: a BindingError, pods Pending (the guide's troubleshooting)."""
    node = lab.kube_nodes[0]
    memory = lab.kubectl("get", "node", node, "-o", "jsonpath={.metadata.labels.nvidia\\.com/gpu\\.memory}").stdout
    lab.kubectl("label", "node", node, "nvidia.com/gpu.memory-")
    try:
        result = smoke(lab, measure_sm_share=False, settle=10, timeout=60)
    finally:
        lab.kubectl("label", "--overwrite", "node", node, "nvidia.com/gpu.memory=%s" % memory)
    assert result.get("failure") == "pending", result.get("msg")
    assert "gpu_memory_label_missing" in [c["cause"] for p in result["pending"] for c in p["causes"]], result["msg"]
    assert "run GPU Feature Discovery" in result["msg"]
    assert our_pods(lab) == []


@pytest.mark.parametrize("case, cause", [
    ({"queue": "no-such-queue"}, "queue_unknown"),
    ({"queue": "default-parent-queue"}, "queue_not_leaf"),
])
def test_pods_that_cannot_be_placed_are_diagnosed(lab, converged, case, cause):
    result = smoke(lab, measure_sm_share=False, settle=10, **case)
    assert result.get("failure") == "pending", result.get("msg")
    assert cause in [c["cause"] for p in result["pending"] for c in p["causes"]], result["msg"]
    assert our_pods(lab) == []


def test_a_cordoned_node_is_tested_only_with_the_toleration(lab, converged):
    """How a rolling driver upgrade validates a node before uncordoning it."""
    node = lab.kube_nodes[0]
    lab.kubectl("cordon", node)
    try:
        refused = smoke(lab, measure_sm_share=False, settle=10, timeout=60)
        assert refused.get("failure") == "pending", refused.get("msg")
        assert "node_cordoned" in [c["cause"] for p in refused["pending"] for c in p["causes"]], refused["msg"]
        assert "is cordoned" in refused["msg"]
        assert our_pods(lab) == []
        result = smoke(lab, tolerate_unschedulable=True)
        assert result.get("passed") is True, result.get("msg")
        assert [c["check"] for c in result["checks"]] == ["binder", "injection", "mps", "memory", "sm_share"]
    finally:
        lab.kubectl("uncordon", node)
    assert our_pods(lab) == []


def test_another_scheduler_is_named(lab, converged):
    result = smoke(lab, measure_sm_share=False, scheduler_name="default-scheduler", settle=10, timeout=60)
    text = result.get("msg", "")
    assert result.get("failure") in ("checks_failed", "pending"), text
    assert "default-scheduler" in text
    assert our_pods(lab) == []


def start_module(lab):
    argv = ["ansible-playbook", MODULE]
    for inv in lab.inventory:
        argv += ["-i", inv]
    return subprocess.Popen(argv, env=lab.env, cwd=str(lab.root), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, start_new_session=True)


def wait_for_pods(lab, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if our_pods(lab):
            return
        time.sleep(1)
    pytest.fail("the module created no pod in %d s" % timeout)


def test_interrupted_run_deletes_its_pods(lab, converged):
    proc = start_module(lab)
    wait_for_pods(lab)
    signal_tree(proc.pid, signal.SIGTERM)
    out = proc.communicate(timeout=120)[0]
    deadline = time.monotonic() + 60
    while our_pods(lab) and time.monotonic() < deadline:
        time.sleep(1)
    assert our_pods(lab) == [], out


def test_killed_run_leaves_pods_that_the_next_run_removes(lab, converged):
    proc = start_module(lab)
    wait_for_pods(lab)
    signal_tree(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert our_pods(lab), "a SIGKILLed run cannot clean up: its pods should be left"
    result = smoke(lab, measure_sm_share=False)
    assert result.get("passed") is True, result.get("msg")
    assert result["changed"] is True
    assert our_pods(lab) == []


@contextlib.contextmanager
def registry_fault(lab, fault):
    """The lab registry answering the test image's pull with `fault`: 404 (a tag never pushed),
    401 (no pull secret) or 500 (its stored manifest link unreadable: the real registry fails
    its own read). Yields the smoke case; the registry is whole again on the way out."""
    if fault != "500":
        yield {"404": {"image": lab.registry.address + "/nvidia/cuda:never-pushed"},
               "401": {"image_pull_secrets": []}}[fault]
        return
    with unreadable(lab.registry.revision_link("nvidia/cuda", "13.3.1-base-ubuntu24.04")):
        yield {}


# What the kubelet passes on of the registry's answer: 401 and 500 as they are; for the
# never-pushed tag the lab's containerd tries its next host after the mirror's 404, so its
# last error is that host's, and the image named is what to check.
@pytest.mark.parametrize("fault, said", [
    ("404", "never-pushed"),
    ("401", "401"),
    ("500", "500"),
])
def test_a_registry_that_refuses_the_test_image_is_named(lab, converged, fault, said):
    with registry_fault(lab, fault) as case:
        result = smoke(lab, measure_sm_share=False, timeout=120, **case)
    assert result.get("failure") == "pending", result.get("msg")
    causes = [c for p in result["pending"] for c in p["causes"]]
    pulls = [c["message"] for c in causes if c["cause"] == "image_pull"]
    assert pulls, result["msg"]
    assert "check the image name, that the node reaches the registry and the pull secret" in pulls[0]
    assert said in pulls[0].lower() or said in result["msg"].lower(), pulls
    assert our_pods(lab) == []


def test_a_lost_api_server_is_named_and_the_next_run_removes_the_pods_it_left(lab, converged):
    proc = start_module(lab)
    wait_for_pods(lab)
    lab.kill_api_server()
    try:
        out = proc.communicate(timeout=300)[0]
    finally:
        lab.bring_back()
    said = " ".join(out.split()).replace("''", "'")   # the play ignores the module's failure and prints it
    assert "failure: cluster" in said and "reading pod default/fraction-smoke-" in said, said[-4000:]
    assert "the test pods could not be deleted" in said and "left in the cluster; the next run deletes them before " \
           "it starts. The API server stopped answering: check it (kubectl get --raw /readyz), then run again" in said, \
        said[-4000:]
    assert our_pods(lab), "the API server was gone: the pods could not be deleted"
    result = smoke(lab, measure_sm_share=False)
    assert result.get("passed") is True, result.get("msg")
    assert result["changed"] is True
    assert our_pods(lab) == []


# Last: the binder may still make a reservation pod from the broken config after it is
# restored, and later runs would wait on that pod.
def test_reservation_pod_without_the_nvidia_runtime_is_diagnosed(lab, converged):
    patch = [{"op": "remove", "path": "/spec/binder/resourceReservation/runtimeClassName"}]
    lab.kubectl("patch", "config.kai.scheduler", "kai-config", "--type", "json", "-p", json.dumps(patch))
    try:
        result = smoke(lab, measure_sm_share=False, settle=30, timeout=120)
    finally:
        lab.kubectl("patch", "config.kai.scheduler", "kai-config", "--type", "merge",
                    "-p", json.dumps({"spec": {"binder": {"resourceReservation": {"runtimeClassName": "nvidia"}}}}))
        # The binder reuses a reservation pod by name: the broken one must go, or later runs wait on it.
        lab.kubectl("-n", "kai-resource-reservation", "delete", "pods", "--all", "--wait=true", "--timeout=120s",
                    check=False)
    assert result.get("failure") == "pending", result.get("msg")
    causes = [c for p in result["pending"] for c in p["causes"]]
    assert "reservation_pod_failed" in [c["cause"] for c in causes], result["msg"]
    assert "no runtimeClassName" in result["msg"]
    assert our_pods(lab) == []
