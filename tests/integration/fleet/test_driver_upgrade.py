"""playbooks/driver_upgrade.yml on the lab's fleet, watched from the API server.

Five GPU-node containers, each a Kubernetes Node: four on branch 580 (one of
them cordoned by someone before), one already on 615. Simulated training pods
hold GPUs, the fractioning DaemonSets run everywhere, a job runs on one node.
The rollout to 615 goes in batches of 2 with at most 2 nodes unavailable:
first with 615.71.09 published broken and a process holding a GPU open on
the batch's other node (the rollout stops, the batch stays cordoned and
labelled upgrade-failed, the holder named), then fixed and killed mid-rollout
(a second rollout meanwhile refused by the first one's lock),
then resumed with a disruption budget that allows nothing on the last node
(left as it was, the budget named; then relaxed) and pods the drain cannot
evict there (KAI's reservation pod and a bare fraction: stopped, the pod
named; then a bare fraction that finishes, waited for), then once more
(nothing to do); last, one node reboots into a machine that never comes
back (failed, named, cordoned; resumed once it is back), then moves back with
the API server killed as it waits for validation (cordoned, its state and the
lock kept; the next run takes the lock over and finishes it), and back again
with the repository answering 404 for its kernel module package (failed,
named; finished once the file is back). A watcher thread
records every Node change throughout; the assertions read it and the Nodes'
Events, not the logs.
"""
import calendar
import datetime
import json
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from fleet_helpers import (RESERVATION_NAMESPACE, ROLLOUT_STATE, STATE, NodeWatcher, as_list, bare_pod, finetune_job,
                           fractioning_daemonsets, gpu_workloads, guarded_server, reservation_pod)
from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.second_lab, pytest.mark.lab_fleet(5), pytest.mark.slow]

NAMESPACE = "smshare-fleet-test"
BROKEN = "615.71.09"
PLAYBOOK = "playbooks/driver_upgrade.yml"
RUN_TIMEOUT = 1500


@pytest.fixture(scope="module")
def fleet(lab, tmp_path_factory):
    if len(lab.gpu_nodes) < 5:
        pytest.fail(f"the lab runs {len(lab.gpu_nodes)} GPU nodes; the fleet tests need 5")
    nodes = lab.gpu_nodes[:5]
    old, cordoned, current = nodes[:4], nodes[2], nodes[4]
    report = tmp_path_factory.mktemp("fleet") / "report.json"
    repo = [str(lab.root / "lab" / "standin" / "apt" / "repo.sh")]

    def playbook(*args, extra=None, background=False, limit=None):
        extra_vars = {"driver_upgrade_serial": 2, "driver_upgrade_max_unavailable": 2,
                      "driver_upgrade_agent_namespace": NAMESPACE, "driver_upgrade_poll_interval": 1,
                      "driver_upgrade_wait_for_jobs_selector": "smshare.kai/job=finetune",
                      "driver_upgrade_wait_for_jobs_timeout": 180, "driver_upgrade_report_file": str(report)}
        extra_vars.update(extra or {})
        argv = ["ansible-playbook", PLAYBOOK, "-l", ",".join(limit or nodes) + ",localhost"]
        for inv in lab.inventory:
            argv += ["-i", inv]
        argv += ["-e", json.dumps(extra_vars), *args]
        if background:
            return subprocess.Popen(argv, cwd=lab.root, env=lab.env, text=True, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        return subprocess.run(argv, cwd=lab.root, env=lab.env, text=True, capture_output=True,
                              timeout=RUN_TIMEOUT, check=False)

    # The fleet before: drivers installed by the collection's own driver play.
    # A kept lab may hold an earlier run's broken install: finish it first.
    subprocess.run(repo + ["fix", BROKEN], cwd=lab.root, env=lab.env, check=True, capture_output=True)
    adhoc = ["ansible", ",".join(old), "-b", "-m", "ansible.builtin.shell", "-a",
             "dpkg --audit >/dev/null 2>&1 && apt-get -q check >/dev/null 2>&1 || (apt-get -q update && apt-get -y -q -f install)"]
    for inv in lab.inventory:
        adhoc += ["-i", inv]
    subprocess.run(adhoc, cwd=lab.root, env=lab.env, check=False, capture_output=True, timeout=600)
    # One driver play for the whole fleet: each node's branch as a host variable.
    branches = tmp_path_factory.mktemp("fleet-branches") / "branches.yml"
    branches.write_text(json.dumps({"all": {"hosts": {
        name: {"smshare_driver_branch": 615 if name == current else 580} for name in nodes}}}))
    proc = lab.playbook("playbooks/driver.yml", "-i", str(branches), "-l", ",".join(nodes))
    assert proc.returncode == 0, describe(proc)
    for name in nodes:   # a kept lab may hold an earlier run's marks
        lab.kubectl("label", "node", name, f"{STATE}-", f"{ROLLOUT_STATE}-")
        lab.kubectl("annotate", "node", name, "smshare.kai/driver-upgrade-target-",
                    "nvidia.com/gpu-driver-upgrade.node-initial-state.unschedulable-",
                    "smshare.kai/driver-upgrade-agents-", "smshare.kai/driver-upgrade-failure-")
        lab.kubectl("uncordon", name)
    lab.kubectl("cordon", cordoned)
    lab.kubectl("-n", "kube-system", "delete", "lease", "smshare-driver-upgrade", "--ignore-not-found")
    lab.kubectl("delete", "namespace", NAMESPACE, "--ignore-not-found", "--wait=true", "--timeout=120s")
    lab.kubectl("create", "namespace", NAMESPACE)
    lab.kubectl("apply", "-f", "-",
                input_text=as_list(fractioning_daemonsets(NAMESPACE) + gpu_workloads(NAMESPACE, 4)))
    wait_until(lambda: len(running(lab, "app.kubernetes.io/component in (mpsd,fractiond)")) == 10
               and len(running(lab, "app=trainer")) == 4, 120, "the agents and the trainers to run")
    watcher = NodeWatcher(lab.kubeconfig, nodes)
    watcher.start()
    assert watcher.synced.wait(30), "the watcher could not list the nodes"
    boots = {n: watcher.current[n]["boot"] for n in nodes}
    fleet_namespaces = [NAMESPACE]
    yield {"lab": lab, "nodes": nodes, "old": old, "cordoned": cordoned, "current": current,
           "watcher": watcher, "playbook": playbook, "report": report, "repo": repo, "boots": boots,
           "marks": {}, "namespaces": fleet_namespaces}
    watcher.stop()
    subprocess.run(repo + ["fix", BROKEN], cwd=lab.root, env=lab.env, check=False, capture_output=True)
    lab.kubectl("delete", "namespace", *fleet_namespaces, "--ignore-not-found", "--wait=false")
    lab.kubectl("uncordon", cordoned)


def wait_until(predicate, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        time.sleep(1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def finish_once_in(lab, watcher, node, state, pods, namespace=NAMESPACE):
    """A thread that lets simulated pods finish (run-seconds 1: the node agent reads the
    annotation on every tick) once `node` is in `state`. Such a pod is started with a run far
    longer than any rollout, so it still runs when the rollout reaches its node however loaded
    the machine is (a fixed 75 s finished before the rollout got there on a loaded 2-core run).
    `pods`: kubectl's selection, e.g. ["-l", "app=x"] or ["name"]."""
    def let_finish():
        if watcher.wait_for(node, state, RUN_TIMEOUT):
            time.sleep(3)   # the rollout sees it running first
            lab.kubectl("-n", namespace, "annotate", "pod", *pods, "--overwrite", "smshare.kai/lab-run-seconds=1",
                        check=False)
    thread = threading.Thread(target=let_finish, daemon=True)
    thread.start()
    return thread


def running(lab, selector, node=None, namespace=NAMESPACE):
    args = ["-n", namespace, "get", "pods", "-l", selector, "-o", "json"]
    if node:
        args += ["--field-selector", f"spec.nodeName={node}"]
    pods = json.loads(lab.kubectl(*args).stdout)["items"]
    return [p for p in pods if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            and all(c.get("ready") for c in p["status"].get("containerStatuses", []))]


def flat(text):
    """Output with its line breaks undone (the YAML callback folds long strings)."""
    return " ".join(text.split())


def failure_note(lab, name):
    """The failure annotation the rollout left on a Node ('' when none)."""
    found = lab.kubectl("get", "node", name, "-o", "json", check=False)
    return json.loads(found.stdout)["metadata"].get("annotations", {}).get("smshare.kai/driver-upgrade-failure", "") \
        if found.returncode == 0 else ""


def lock_holder(lab):
    found = lab.kubectl("-n", "kube-system", "get", "lease", "smshare-driver-upgrade",
                        "-o", "jsonpath={.spec.holderIdentity}", check=False)
    return found.stdout.strip() if found.returncode == 0 else None


def budget_allows(lab, name):
    found = lab.kubectl("-n", NAMESPACE, "get", "pdb", name, "-o", "jsonpath={.status.disruptionsAllowed}",
                        check=False)
    return int(found.stdout) if found.returncode == 0 and found.stdout.strip() else None


def pod_phase(lab, namespace, name):
    found = lab.kubectl("-n", namespace, "get", "pod", name, "-o", "jsonpath={.status.phase}", check=False)
    return found.stdout.strip() if found.returncode == 0 else ""


def node_marks(lab, names):
    """Labels, annotations and schedulability of the nodes, minus what heartbeats change."""
    items = json.loads(lab.kubectl("get", "nodes", *names, "-o", "json").stdout)["items"]
    return {n["metadata"]["name"]: (n["metadata"].get("labels"), n["metadata"].get("annotations"),
                                    n["spec"].get("unschedulable", False)) for n in items}


def row_since(row):
    """A report row's since (UTC, to the second) as epoch seconds."""
    return calendar.timegm(time.strptime(row["since"], "%Y-%m-%dT%H:%M:%SZ"))


def report_of(fleet):
    return {row["node"]: row for row in json.loads(fleet["report"].read_text())["nodes"]}


def test_check_mode_changes_nothing(fleet):
    lab = fleet["lab"]
    before = node_marks(lab, fleet["nodes"])
    proc = fleet["playbook"]("--check")
    assert proc.returncode == 0, describe(proc)
    assert "would move from no upgrade state to branch 615" in proc.stdout
    assert "batches 2, 1, 1" in proc.stdout, describe(proc)
    assert node_marks(lab, fleet["nodes"]) == before


def test_an_unreachable_node_is_left_out_and_counted_unavailable(fleet):
    """The node already on 615, paused: Ansible cannot reach it. It is planned as
    unavailable (with the cordoned one, 2 of the 3 allowed), the others go on."""
    lab, current = fleet["lab"], fleet["current"]
    subprocess.run(["podman", "pause", current], check=True, capture_output=True)
    try:
        proc = fleet["playbook"]("--check", extra={"driver_upgrade_max_unavailable": 3})
    finally:
        subprocess.run(["podman", "unpause", current], check=False, capture_output=True)
    assert proc.returncode == 0, describe(proc)
    assert re.search(rf"{current}: skip \(unreachable \(.+\): not upgraded, counted as unavailable", flat(proc.stdout)), \
        describe(proc)
    assert re.search(r"unavailable now: \S+, \S+\)", flat(proc.stdout)) and "batches 2, 1, 1" in flat(proc.stdout), \
        describe(proc)


@pytest.mark.parametrize("extra, words", [
    ({"driver_upgrade_serial": 0}, ["driver_upgrade_serial is '0'", "a count above 0", "Nothing was changed"]),
    ({"driver_upgrade_max_unavailable": "150%"}, ["driver_upgrade_max_unavailable is '150%'"]),
    ({"driver_upgrade_drain_timeout": -5}, ["driver_upgrade_drain_timeout is '-5'", "seconds above 0"]),
    ({"smshare_driver_method": "gpu_operator"}, ["host-installed drivers only", "GPU Operator"]),
    # A typo in a label key or condition type once showed only as a Ready wait that timed out.
    ({"driver_upgrade_driver_label": "nvidia.com/cuda driver-version"},
     ["driver_upgrade_driver_label is 'nvidia.com/cuda driver-version'", "Node label key"]),
    ({"driver_upgrade_agent_condition": "gpu-fractioning.nvidia.com/"},
     ["driver_upgrade_agent_condition is 'gpu-fractioning.nvidia.com/'", "Node condition type"]),
    ({"driver_upgrade_mps_pipe_directory": "run/nvidia-mps"},
     ["driver_upgrade_mps_pipe_directory is 'run/nvidia-mps'", "an absolute path without spaces"]),
    ({"driver_upgrade_kubeconfig": "/nonexistent/smshare-kubeconfig"},
     ["driver_upgrade_kubeconfig is /nonexistent/smshare-kubeconfig, which does not exist", "Nothing was changed"]),
])
def test_bad_input_is_refused_before_anything_changes(fleet, extra, words):
    lab = fleet["lab"]
    before = node_marks(lab, fleet["nodes"])
    proc = fleet["playbook"](extra=extra)
    assert proc.returncode != 0, describe(proc)
    for word in words:
        assert word in proc.stdout + proc.stderr, describe(proc)
    assert node_marks(lab, fleet["nodes"]) == before


def test_a_gpu_operator_that_leaves_the_host_drivers_alone_is_no_second_owner(fleet):
    """A ClusterPolicy with the driver on (unset: the operator's default) owns the driver
    of the nodes it labels nvidia.com/gpu.deploy.driver=true; nodes with a host driver it
    labels pre-installed and leaves alone (the lab's node agent labels them as it does).
    So the rollout goes on here; the refusal of nodes the operator would take is the
    filter's unit tests' (a host-driver node cannot carry `true` in the lab: the agent
    relabels it, as the operator would)."""
    lab = fleet["lab"]
    crd = "clusterpolicies.nvidia.com"
    labels = {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in
              json.loads(lab.kubectl("get", "nodes", *fleet["nodes"], "-o", "json").stdout)["items"]}
    assert {n: v.get("nvidia.com/gpu.deploy.driver") for n, v in labels.items()} == \
        {n: "pre-installed" for n in fleet["nodes"]}
    had_crd = lab.kubectl("get", "crd", crd, check=False).returncode == 0
    policy = {"apiVersion": "nvidia.com/v1", "kind": "ClusterPolicy", "metadata": {"name": "smshare-test-operator"},
              "spec": {"driver": {"version": "615.71.09"}}}
    before = node_marks(lab, fleet["nodes"])
    try:
        if not had_crd:
            lab.kubectl("apply", "-f", str(lab.root / "lab/standin/charts/gpu-operator/crds/nvidia.com_clusterpolicies.yaml"))
            lab.kubectl("wait", "--for", "condition=established", f"crd/{crd}", "--timeout=60s")
        lab.kubectl("apply", "-f", "-", input_text=json.dumps(policy))
        proc = fleet["playbook"]("--check")
    finally:
        lab.kubectl("delete", "clusterpolicy", policy["metadata"]["name"], "--ignore-not-found", check=False)
        if not had_crd:
            lab.kubectl("delete", "crd", crd, "--ignore-not-found", check=False)
    assert proc.returncode == 0, describe(proc)
    assert "manages the driver" not in flat(proc.stdout) and "batches 2, 1, 1" in proc.stdout, describe(proc)
    assert node_marks(lab, fleet["nodes"]) == before


HOLDER_PID = "/run/smshare-test-gpu-holder.pid"
HOLDER_DEVICE = "/run/smshare-test-gpu-holder.made-device"


def hold_a_gpu(node):
    """A process on the node keeping a GPU device open (the device node a stand-in for the driver's)."""
    subprocess.run(["podman", "exec", node, "sh", "-c",
                    f"rm -f {HOLDER_PID}; test -e /dev/nvidia0 || {{ : > /dev/nvidia0; : > {HOLDER_DEVICE}; }}"],
                   check=True)
    subprocess.run(["podman", "exec", "-d", node, "sh", "-c",
                    f"exec 3</dev/nvidia0; echo $$ > {HOLDER_PID}; exec sleep 3600"], check=True)
    wait_until(lambda: subprocess.run(["podman", "exec", node, "sh", "-c",
                                       f'readlink /proc/"$(cat {HOLDER_PID})"/fd/3 | grep -qx /dev/nvidia0'],
                                      check=False).returncode == 0, 10, "the holder to start")


def let_go_of_the_gpu(node):
    subprocess.run(["podman", "exec", node, "sh", "-c",
                    f'kill "$(cat {HOLDER_PID})"; rm -f {HOLDER_PID}; '
                    f"test -e {HOLDER_DEVICE} && rm -f /dev/nvidia0 {HOLDER_DEVICE}; true"], check=False)


MPS_PIPE = "/run/nvidia-mps"   # driver_upgrade_mps_pipe_directory's default: mpsd's host path
MPS_CLIENT_PID = "/run/smshare-test-mps-client.pid"
# A client of the stand-in daemon (lab/standin/CONTRACT.md: the lab's client
# protocol): attach, then stay attached until killed.
MPS_CLIENT = f"""
import json, os, socket, time
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.connect("{MPS_PIPE}/control")
sock.sendall(json.dumps({{"client": {{"requested": "100", "pid": os.getpid(), "cmd": "trainer", "device": ""}}}}).encode() + b"\\n")
answer = b""
while not answer.endswith(b"\\n"):
    answer += sock.recv(65536)
open("{MPS_CLIENT_PID}", "w").write(str(os.getpid()))
time.sleep(3600)
"""


def attach_an_mps_client(node):
    """The node's MPS daemon (as mpsd runs it, on its host path) with a client attached.
    The node is on 580: the daemon speaks the legacy protocol."""
    env = f"CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE} CUDA_MPS_LOG_DIRECTORY=/var/log/nvidia-mps"
    subprocess.run(["podman", "exec", node, "sh", "-c",
                    f"rm -f {MPS_CLIENT_PID}; mkdir -p {MPS_PIPE} /var/log/nvidia-mps; "
                    f"{env} nvidia-cuda-mps-control -d"], check=True, capture_output=True)
    subprocess.run(["podman", "exec", "-d", node, "python3", "-c", MPS_CLIENT], check=True)
    wait_until(lambda: subprocess.run(["podman", "exec", node, "test", "-s", MPS_CLIENT_PID],
                                      check=False).returncode == 0, 15, "the MPS client to attach")
    return int(subprocess.run(["podman", "exec", node, "cat", MPS_CLIENT_PID], check=True, text=True,
                              capture_output=True).stdout)


def detach_the_mps_client(node):
    subprocess.run(["podman", "exec", node, "sh", "-c",
                    f'kill "$(cat {MPS_CLIENT_PID})"; rm -f {MPS_CLIENT_PID}; '
                    f"echo quit | CUDA_MPS_PIPE_DIRECTORY={MPS_PIPE} nvidia-cuda-mps-control; "
                    f"sleep 1; rm -rf {MPS_PIPE}; true"], check=False, capture_output=True)


def test_an_attached_mps_client_stops_its_node_before_the_agents_leave(fleet):
    """After the drain a client still attached to the node's MPS daemon would lose its
    server with the agents: the node fails, the client named, before the rollout waits
    for the agents to leave and before its driver changes."""
    lab, watcher, first = fleet["lab"], fleet["watcher"], fleet["cordoned"]   # the plan's first node
    start = time.time()
    try:
        pid = attach_an_mps_client(first)
        proc = fleet["playbook"](extra={"driver_upgrade_serial": 1, "driver_upgrade_holders_timeout": 3})
    finally:
        detach_the_mps_client(first)
    assert proc.returncode != 0, describe(proc)
    note = json.loads(lab.kubectl("get", "node", first, "-o", "json").stdout)["metadata"]["annotations"][
        "smshare.kai/driver-upgrade-failure"]
    assert re.search(rf"1 MPS client\(s\) still attached after driver_upgrade_holders_timeout \(3 s\), so the "
                     rf"driver was not changed: MPS client pid {pid} attached to server pid "
                     rf"[0-9]+: end it, or detach it \(echo terminate_client [0-9]+ {pid} \| nvidia-cuda-mps-control\)",
                     note), note
    assert watcher.current[first]["state"] == "upgrade-failed" and watcher.current[first]["unschedulable"]
    assert "pod-restart-required" not in watcher.states_of(first, start), "stopped before the agents' step"
    # The agents stay (the GPU Operator's label untouched): what still runs there keeps its MPS.
    assert watcher.changes_of(first, start, "agents_state") == [], watcher.changes_of(first, start)
    assert len(running(lab, "app.kubernetes.io/component in (mpsd,fractiond)", first)) == 2
    assert watcher.current[first]["boot"] == fleet["boots"][first]
    for name in fleet["old"]:   # serial 1: the rollout stopped at its first node
        if name != first:
            assert watcher.states_of(name, start) == [], name


def test_a_broken_package_and_a_gpu_holder_stop_the_rollout_with_the_batch_cordoned_and_failed(fleet):
    lab, watcher = fleet["lab"], fleet["watcher"]
    first, second = fleet["cordoned"], fleet["old"][0]     # the plan's first batch
    later = [n for n in fleet["old"] if n not in (first, second)]
    # A job still running on a node of the first batch: the rollout waits for it (it ends
    # a few seconds after the rollout reached wait-for-jobs-required there).
    lab.kubectl("apply", "-f", "-", input_text=json.dumps(finetune_job(NAMESPACE, second, 3600)))
    wait_until(lambda: running(lab, "smshare.kai/job=finetune"), 60, "the job to run")
    finish_once_in(lab, watcher, second, "wait-for-jobs-required", ["-l", "smshare.kai/job=finetune"])
    subprocess.run(fleet["repo"] + ["break", BROKEN], cwd=lab.root, env=lab.env, check=True, capture_output=True)
    # On the other node of the batch a process keeps a GPU open: its driver must stay as it is.
    start = time.time()
    try:
        hold_a_gpu(first)
        proc = fleet["playbook"](extra={"driver_upgrade_holders_timeout": 4})
    finally:
        let_go_of_the_gpu(first)
    fleet["marks"]["broken"] = time.time()
    assert proc.returncode != 0, describe(proc)
    assert "Bad return status for module build" in proc.stdout, describe(proc)
    rows = report_of(fleet)
    for name in (first, second):
        assert watcher.current[name]["state"] == "upgrade-failed"
        assert watcher.current[name]["unschedulable"]
        assert watcher.current[name]["driver"].startswith("580."), "the old driver stays loaded"
        assert rows[name]["state"] == "upgrade-failed"
    notes = {name: json.loads(lab.kubectl("get", "node", name, "-o", "json").stdout)["metadata"]["annotations"]
             ["smshare.kai/driver-upgrade-failure"] for name in (first, second)}
    assert "Install" in rows[second]["note"] and "nvidia-dkms-615-open" in notes[second]
    # The holder is named, with why and what to do; the node never reached its install.
    assert re.search(r"1 still hold a GPU after driver_upgrade_holders_timeout \(4 s\), so the driver was not "
                     r"changed: pid [0-9]+ \(sleep\)\. pid [0-9]+ \(sleep\) has /dev/nvidia0 open: stop it",
                     notes[first]), notes[first]
    assert "pod-restart-required" in watcher.states_of(first, start)
    assert watcher.current[first]["boot"] == fleet["boots"][first], "the holder's node was not rebooted"
    for name in later:   # the rollout stopped: the next batches never began
        assert watcher.states_of(name, start) == [] and not watcher.current[name]["unschedulable"]
        assert rows[name]["state"] == "not started"
    # Each row says since when: the failed nodes since they failed, the others since the rollout began.
    since = {name: row_since(row) for name, row in rows.items()}
    for name in (first, second):
        assert int(start) <= since[name] <= time.time(), rows[name]
        assert all(since[other] <= since[name] for other in later), rows
    # The job finished on its own, on its node, before the node was drained
    # (an evicted job pod would have run again elsewhere and finished later).
    job = json.loads(lab.kubectl("-n", NAMESPACE, "get", "job", "finetune", "-o", "json").stdout)
    assert job["status"].get("succeeded") == 1 and not job["status"].get("failed"), job["status"]
    finished = datetime.datetime.strptime(job["status"]["completionTime"], "%Y-%m-%dT%H:%M:%SZ") \
        .replace(tzinfo=datetime.timezone.utc).timestamp()
    waited = [t for t, d in watcher.changes_of(second, start, "state") if d["state"] == "wait-for-jobs-required"]
    drained = [t for t, d in watcher.changes_of(second, start, "state") if d["state"] == "drain-required"]
    assert waited and drained and waited[0] - 1 <= finished <= drained[0] + 1, \
        (finished, watcher.changes_of(second, start))
    lab.kubectl("-n", NAMESPACE, "delete", "job", "finetune", "--wait=false")
    assert lock_holder(lab) is None, "a stopped rollout gives its lock back"


def test_a_killed_rollout_resumes_without_redoing_done_nodes(fleet):
    lab, watcher = fleet["lab"], fleet["watcher"]
    subprocess.run(fleet["repo"] + ["fix", BROKEN], cwd=lab.root, env=lab.env, check=True, capture_output=True)
    first_batch = [fleet["cordoned"], fleet["old"][0]]
    victim = fleet["old"][1]
    last = fleet["old"][3]
    proc = fleet["playbook"](background=True)
    try:
        # A second rollout while the first runs is refused, naming the first.
        wait_until(lambda: lock_holder(lab) or proc.poll() is not None, 300, "the rollout to take its lock")
        second = fleet["playbook"]()
        assert second.returncode != 0, describe(second)
        assert re.search(r"another rollout holds the lock \(Lease kube-system/smshare-driver-upgrade\): \S+@\S+ "
                         r"driver_upgrade to 615 ", second.stdout), describe(second)
        reached = watcher.wait_for(victim, "validation-required", RUN_TIMEOUT, process=proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        output = proc.communicate(timeout=60)[0]
    assert reached, f"{victim} never reached validation-required: {watcher.changes_of(victim)}\n{output[-6000:]}"
    killed, killed_pid = time.time(), proc.pid
    # The killed run's lock stays; its run ended on this controller, so the next run takes it over at once
    # (a run on another machine waits for its TTL: tests/integration/lab/test_rollout_lock.py).
    dead = lock_holder(lab)
    assert dead and "driver_upgrade to 615" in dead
    for name in first_batch:
        assert watcher.current[name]["state"] == "upgrade-done"
        assert watcher.current[name]["driver"].startswith("615.")
    assert watcher.current[victim]["unschedulable"], "the interrupted node stays cordoned"
    boots = {n: watcher.current[n]["boot"] for n in fleet["nodes"]}

    # On the last node: a pod whose disruption budget allows no eviction, and
    # pods the drain cannot evict, KAI's reservation pod and a fraction no
    # controller manages that does not finish.
    reservation, holdout = reservation_pod(last), bare_pod(NAMESPACE, "holdout", last)
    if lab.kubectl("create", "namespace", RESERVATION_NAMESPACE, check=False).returncode == 0:
        fleet["namespaces"].append(RESERVATION_NAMESPACE)   # made here: the fixture removes it
    lab.kubectl("apply", "-f", "-", input_text=as_list([reservation, holdout] + guarded_server(NAMESPACE, last)))
    wait_until(lambda: running(lab, "app=" + RESERVATION_NAMESPACE, last, RESERVATION_NAMESPACE)
               and pod_phase(lab, NAMESPACE, "holdout") == "Running" and running(lab, "app=keeper", last)
               and budget_allows(lab, "keeper") == 0, 90, "the bare pods, the guarded server and its budget")

    # The budget first: the node is left as it was, the rollout ends failed naming it.
    proc = fleet["playbook"](extra={"driver_upgrade_bare_pods_timeout": 3, "driver_upgrade_budget_timeout": 3})
    assert proc.returncode != 0, describe(proc)
    assert watcher.current[victim]["state"] == "upgrade-done"
    assert watcher.states_of(last, killed) == [] and not watcher.current[last]["unschedulable"], \
        watcher.changes_of(last, killed)
    assert re.search(rf"1 node\(s\) not upgraded, each left as it was: "
                     rf"{last}: not cordoned after driver_upgrade_budget_timeout \(3 s\): "
                     rf"PodDisruptionBudget {NAMESPACE}/keeper allows 0 disruption\(s\) now and draining {last} "
                     rf"would evict 1 of its pods \({NAMESPACE}/keeper-", flat(proc.stdout)), describe(proc)
    assert report_of(fleet)[last]["state"] == "blocked"
    assert re.search(rf"Took over the rollout lock from {re.escape(dead)}: its run \(pid {killed_pid} on this machine\) "
                     rf"has ended\.", flat(proc.stdout)), describe(proc)
    assert lock_holder(lab) is None, "a rollout that ends blocked gives its lock back"

    # Relaxed, the budget lets the node go on, to the bare pods: the default policy
    # (stop) leaves the node cordoned on its old driver, the pod named.
    lab.kubectl("-n", NAMESPACE, "patch", "pdb", "keeper", "--type=merge", "-p", '{"spec":{"minAvailable":0}}')
    wait_until(lambda: budget_allows(lab, "keeper") == 1, 60, "the relaxed budget to allow a disruption")
    proc = fleet["playbook"](extra={"driver_upgrade_bare_pods_timeout": 3})
    assert proc.returncode != 0, describe(proc)
    assert watcher.current[last]["state"] == "upgrade-failed" and watcher.current[last]["unschedulable"]
    assert watcher.current[last]["driver"].startswith("580.") and watcher.current[last]["boot"] == boots[last]
    note = json.loads(lab.kubectl("get", "node", last, "-o", "json").stdout)["metadata"]["annotations"][
        "smshare.kai/driver-upgrade-failure"]
    assert (f"1 bare pod(s) still on the node after driver_upgrade_bare_pods_timeout (3 s), so it was not drained "
            f"and its driver was not changed: {NAMESPACE}/holdout.") in note, note
    # The pods that asked not to be disrupted were named, with their fate, before anything touched them.
    assert (f"pod {RESERVATION_NAMESPACE}/{reservation['metadata']['name']} (KAI reservation pod, requests "
            "nvidia.com/gpu, annotated karpenter.sh/do-not-disrupt): deleted before the drain") in flat(proc.stdout), \
        describe(proc)
    assert pod_phase(lab, NAMESPACE, "holdout") == "Running", "a stopped node's pods are left alone"
    assert len(running(lab, "app.kubernetes.io/component in (mpsd,fractiond)", last)) == 2, \
        "the stopped fraction keeps its agents (and MPS)"

    # A fraction that finishes in a while is waited for, then the node drains. It starts
    # with the rollout and ends a few seconds after the rollout reached drain-required.
    lab.kubectl("-n", NAMESPACE, "delete", "pod", "holdout", "--wait=true")
    resumed = time.time()
    finish_once_in(lab, watcher, last, "drain-required", ["short-fraction"])
    proc = fleet["playbook"](background=True)
    said = []   # drained as it comes: a full pipe would stop the play
    reader = threading.Thread(target=lambda: said.append(proc.stdout.read()), daemon=True)
    reader.start()
    finished = None
    try:   # the drain deletes the finished pod: its end is read while the rollout runs
        lab.kubectl("apply", "-f", "-", input_text=json.dumps(bare_pod(NAMESPACE, "short-fraction", last, seconds=3600)))
        wait_until(lambda: pod_phase(lab, NAMESPACE, "short-fraction") in ("Running", "Succeeded"), 60,
                   "the short fraction to run")
        while finished is None and proc.poll() is None:
            found = lab.kubectl("-n", NAMESPACE, "get", "pod", "short-fraction", "-o", "json", check=False)
            status = json.loads(found.stdout)["status"] if found.returncode == 0 else {}
            if status.get("phase") == "Succeeded":
                finished = datetime.datetime.strptime(
                    status["containerStatuses"][0]["state"]["terminated"]["finishedAt"], "%Y-%m-%dT%H:%M:%SZ") \
                    .replace(tzinfo=datetime.timezone.utc).timestamp()
            time.sleep(1)
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(60)
    output = "".join(said)
    assert proc.returncode == 0, output[-6000:]
    assert finished, "the short fraction was not seen finished"
    states = watcher.changes_of(last, resumed, "state")
    drain = [t for t, d in states if d["state"] == "drain-required"]
    restart = [t for t, d in states if d["state"] == "pod-restart-required"]
    assert drain and restart and drain[0] - 1 <= finished <= restart[0] + 1, (finished, states)
    # The fraction had its agents to the end: the label they leave on came after it finished.
    agents_off = [t for t, d in watcher.changes_of(last, resumed, "agents_state") if d["agents_state"]]
    assert agents_off and agents_off[0] >= finished - 1, (finished, watcher.changes_of(last, resumed))
    gone = lab.kubectl("-n", RESERVATION_NAMESPACE, "get", "pod", reservation["metadata"]["name"], check=False)
    assert gone.returncode != 0 and "NotFound" in gone.stderr, "the reservation pod was deleted"
    lab.kubectl("-n", NAMESPACE, "delete", "pod", "short-fraction", "--ignore-not-found", "--wait=false")
    assert lock_holder(lab) is None, "a finished rollout gives its lock back"
    time.sleep(2)
    for name in first_batch:   # done before the kill: not touched again
        assert watcher.changes_of(name, killed) == [], watcher.changes_of(name, killed)
    # The victim resumed after its reboot: no earlier state again, no second reboot.
    assert watcher.states_of(victim, killed) == ["upgrade-done"], watcher.changes_of(victim, killed)
    assert watcher.current[victim]["boot"] == boots[victim]
    assert watcher.states_of(last, killed)[:2] == ["upgrade-required", "cordon-required"]
    assert watcher.current[last]["boot"] != boots[last], "the last node was rebooted into 615"
    rows = report_of(fleet)
    assert json.loads(fleet["report"].read_text())["finished"] is True
    # The last run finished the last node; the victim was done by the one before.
    assert rows[last]["state"] == "upgrade-done" and rows[victim]["note"] == "already on branch 615", rows
    assert "rollout to branch 615" in output


def test_the_rules_held_throughout(fleet):
    lab, watcher = fleet["lab"], fleet["watcher"]
    assert watcher.max_unschedulable <= 2, (watcher.max_unschedulable, watcher.peak_unschedulable)
    assert watcher.max_unavailable <= 2
    assert watcher.max_unschedulable == 2, "batches of two were used"
    current = fleet["current"]   # already on 615: never touched
    assert watcher.changes_of(current, 0.0, "state") == []
    # The label the agents leave on was never set before a node's workloads were gone.
    for name in fleet["old"]:
        seen = {d["agents_state"] for _t, d in watcher.changes_of(name, 0.0, "agents_state")}
        assert seen <= {"pod-restart-required", "validation-required", "upgrade-done", "upgrade-failed"}, (name, seen)
    assert watcher.changes_of(current, 0.0, "unschedulable") == []
    assert watcher.current[current]["boot"] == fleet["boots"][current]
    for name in fleet["old"]:
        assert watcher.current[name]["driver"] == "615.71.09" and watcher.current[name]["state"] == "upgrade-done"
        assert watcher.current[name]["unschedulable"] == (name == fleet["cordoned"])
        annotations = json.loads(lab.kubectl("get", "node", name, "-o", "json").stdout)["metadata"]["annotations"]
        assert not [k for k in annotations if "driver-upgrade" in k], annotations
    # `kubectl describe node` tells the last node's story: a budget blocked it, bare pods stopped it, then
    # it went through every state (the wait for jobs included: a job selector is set).
    last = fleet["old"][3]
    described = lab.kubectl("describe", "node", last).stdout
    assert "DriverUpgradeBlocked" in described and "upgrade-failed: Check no bare pod is left" in described, described
    events = json.loads(lab.kubectl("-n", "kube-system", "get", "events", "-o", "json", "--field-selector",
                                    f"involvedObject.kind=Node,involvedObject.name={last},reason=DriverUpgrade")
                        .stdout)["items"]
    states = [e["message"].split(":", 1)[0] for e in sorted(events, key=lambda e: int(e["metadata"]["resourceVersion"]))]
    assert states[-7:] == ["upgrade-required", "cordon-required", "wait-for-jobs-required", "drain-required",
                           "pod-restart-required", "validation-required", "upgrade-done"], states
    assert "upgrade-failed" in states
    # The fractioning agents came back on every node, the training pods run.
    for name in fleet["nodes"]:
        assert len(running(lab, "app.kubernetes.io/component in (mpsd,fractiond)", name)) == 2, name
    assert len(running(lab, "app=trainer")) == 4


def at_validation(lab, watcher, name):
    """The node as a rollout interrupted before its validation leaves it: cordoned, validation-required."""
    lab.kubectl("cordon", name)
    lab.kubectl("label", "node", name, "--overwrite", f"{STATE}=validation-required", f"{ROLLOUT_STATE}=validation-required")
    lab.kubectl("annotate", "node", name, "--overwrite", "smshare.kai/driver-upgrade-target=615")
    wait_until(lambda: watcher.current[name]["unschedulable"] and watcher.current[name]["state"] == "validation-required",
               10, "the watcher to see the node cordoned at validation-required")


def test_a_validation_that_cannot_run_fails_its_node_within_its_timeout(fleet):
    """Two nodes resumed at their validation on a cluster without KAI. With the default
    (driver_upgrade_smoke_test auto) the run says why there is no smoke test and finishes
    the node; with always, the smoke test cannot prove the fractions there, so the node
    fails within the smoke test's timeout and stays cordoned."""
    lab, watcher, name = fleet["lab"], fleet["watcher"], fleet["old"][0]
    # The fractioning agents the node runs now, upgrade-done: the count a rollout notes as they
    # leave (at validation-required they keep off the node).
    agents = len(running(lab, "app.kubernetes.io/component in (mpsd,fractiond)", name))
    assert agents > 0
    try:
        at_validation(lab, watcher, name)
        # The node ran agents, so only the missing KAI queues keep the smoke test off.
        lab.kubectl("annotate", "node", name, "--overwrite", f"smshare.kai/driver-upgrade-agents={agents}")
        begun = time.time()
        finished = fleet["playbook"]()
        without_smoke = time.time() - begun   # the same run without a smoke test: this machine's pace now
        assert finished.returncode == 0, describe(finished)
        assert (f"No smoke test on {name} (driver_upgrade_smoke_test auto): the cluster serves no KAI queues"
                in flat(finished.stdout)), describe(finished)
        assert watcher.current[name]["state"] == "upgrade-done" and not watcher.current[name]["unschedulable"]
        # A node that ran no agents has no fractions to prove: the queues are not even read.
        at_validation(lab, watcher, name)
        finished = fleet["playbook"]()
        assert finished.returncode == 0, describe(finished)
        assert (f"No smoke test on {name} (driver_upgrade_smoke_test auto): the node ran no fractioning agents"
                in flat(finished.stdout)), describe(finished)
        assert re.search(r"TASK \[smshare\.kai\.driver_upgrade : Look for KAI's queues[^\n]*\n+skipping: \[%s\]"
                         % re.escape(name), finished.stdout), describe(finished)
        assert watcher.current[name]["state"] == "upgrade-done" and not watcher.current[name]["unschedulable"]
        at_validation(lab, watcher, name)
        start = time.time()
        failed = fleet["playbook"](extra={"driver_upgrade_smoke_test": "always", "driver_upgrade_smoke_test_timeout": 30})
        took = time.time() - start
        assert failed.returncode != 0, describe(failed)
        note = json.loads(lab.kubectl("get", "node", name, "-o", "json").stdout)["metadata"]["annotations"][
            "smshare.kai/driver-upgrade-failure"]
        assert note.startswith("Run the guide's smoke test on the node:"), note
        assert watcher.current[name]["state"] == "upgrade-failed" and watcher.current[name]["unschedulable"]
        assert watcher.changes_of(name, start, "unschedulable") == [], "never uncordoned"
        # Within its 30 s, not the default 300 s: compared with the run without it, not with a
        # fixed time (a loaded machine makes every run slower).
        assert took < without_smoke + 30 + 90, \
            f"{took:.0f} s against {without_smoke:.0f} s without the smoke test: its timeout is 30 s"
    finally:   # the node as the first run left it (upgrade-done), for the last test
        lab.kubectl("label", "node", name, "--overwrite", f"{STATE}=upgrade-done", f"{ROLLOUT_STATE}=upgrade-done")
        lab.kubectl("annotate", "node", name, "smshare.kai/driver-upgrade-target-", "smshare.kai/driver-upgrade-failure-",
                    "smshare.kai/driver-upgrade-agents-", check=False)
        lab.kubectl("uncordon", name)


def test_a_second_run_changes_nothing(fleet):
    proc = fleet["playbook"]()
    assert proc.returncode == 0, describe(proc)
    for name in fleet["nodes"]:
        assert recap(proc.stdout, name)["changed"] == 0
    assert proc.stdout.count("skip (already on branch 615)") == 5, describe(proc)


def test_a_node_that_goes_notready_during_the_rollout_takes_a_slot(fleet):
    """Two nodes moved to the other branch (580 after the tests above, 615 alone) one at a
    time, with one node out of service allowed. A third node (left out of the rollout by the skip label, but counted)
    goes NotReady while the first is upgraded: when the next batch begins it holds the one
    slot, so the second node is left as it was, named with the NotReady one, and the
    others are not held up. Once it is back, a re-run finishes the second. A watcher, not
    the play's log, records what was out of service whenever the rollout cordoned a node."""
    lab, watcher = fleet["lab"], fleet["watcher"]
    first, second, sick = fleet["old"][0], fleet["old"][1], fleet["old"][3]
    lab.kubectl("uncordon", fleet["cordoned"])   # outside this rollout: the watcher would count it
    lab.kubectl("label", "node", sick, "--overwrite", "nvidia.com/gpu-driver-upgrade.skip=true")
    branch = 580 if watcher.current[first]["driver"].startswith("615.") else 615
    extra = {"driver_upgrade_branch": branch, "driver_upgrade_serial": 1, "driver_upgrade_max_unavailable": 1}
    start = time.time()
    proc = fleet["playbook"](extra=extra, limit=[first, second, sick], background=True)
    said = []   # drained as it comes: a full pipe would stop the play
    reader = threading.Thread(target=lambda: said.append(proc.stdout.read()), daemon=True)
    reader.start()
    try:
        reached = watcher.wait_for(first, "validation-required", RUN_TIMEOUT, process=proc)
        if reached:   # rebooted into 580, still cordoned: the next batch has not begun
            subprocess.run(["podman", "exec", sick, "systemctl", "stop", "smshare-node-agent"], check=True)
            wait_until(lambda: not watcher.current[sick]["ready"], 30, f"{sick} to be NotReady")
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        reader.join(60)
        subprocess.run(["podman", "exec", sick, "systemctl", "start", "smshare-node-agent"], check=False)
    output = "".join(said)
    told = f"{watcher.changes_of(first, start)}\nfailure note: {failure_note(lab, first)}\n{output[-8000:]}"
    assert reached, f"{first} never reached validation-required: {told}"
    assert proc.returncode != 0, told
    assert watcher.current[first]["state"] == "upgrade-done", told
    assert watcher.current[first]["driver"].startswith(f"{branch}."), told
    assert watcher.states_of(second, start) == [] and not watcher.current[second]["unschedulable"], \
        watcher.changes_of(second, start)
    assert re.search(rf"1 node\(s\) not upgraded, each left as it was: {second}: not cordoned: 1 GPU node\(s\) are "
                     rf"unavailable now and at most 1 may be \(driver_upgrade_max_unavailable\): "
                     rf"{sick} \(NotReady since [0-9T:-]+Z\)", flat(output)), output[-6000:]
    assert report_of(fleet)[second]["state"] == "blocked"
    described = lab.kubectl("describe", "node", second).stdout
    assert "DriverUpgradeBlocked" in described, described
    assert watcher.states_of(sick, start) == [], "a skipped node is never touched"

    wait_until(lambda: watcher.current[sick]["ready"], 60, f"{sick} to be Ready again")
    again = fleet["playbook"](extra=extra, limit=[first, second, sick])
    assert again.returncode == 0, describe(again)
    assert watcher.current[second]["state"] == "upgrade-done" and watcher.current[second]["driver"].startswith(f"{branch}.")
    assert f"{first}: skip (already on branch {branch})" in flat(again.stdout), describe(again)
    # Whenever the rollout cordoned a node, nothing else was out of service (one allowed).
    cordons = watcher.cordons_since(start)
    assert [name for name, _others in cordons] == [first, second], cordons
    assert all(others == [] for _name, others in cordons), cordons
    lab.kubectl("label", "node", sick, "nvidia.com/gpu-driver-upgrade.skip-")


def test_a_node_that_never_comes_back_from_its_reboot_fails_and_the_next_run_finishes_it(fleet):
    """The node moved to the other branch reboots into a machine that does not start (its
    init is gone, as a machine that hangs in its firmware or fails its boot). The reboot
    times out: the node is upgrade-failed, cordoned, its annotation says what happened and
    what to do, the lock is given back. Once the machine is back (by hand: the only manual
    step), the next run resumes it, finds the new driver loaded and uncordons it, without
    rebooting it again."""
    lab, watcher, victim = fleet["lab"], fleet["watcher"], fleet["current"]
    branch = 580 if watcher.current[victim]["driver"].startswith("615.") else 615
    extra = {"driver_upgrade_branch": branch, "driver_upgrade_serial": 1, "driver_upgrade_max_unavailable": 1,
             "nvidia_driver_reboot_timeout": 30,
             "nvidia_driver_reboot_command": "/bin/sh -c 'mv /sbin/init /sbin/init.gone && systemd-run --on-active=1 "
                                             "--timer-property=AccuracySec=100ms systemctl reboot --no-wall'"}
    start = time.time()
    try:
        proc = fleet["playbook"](extra=extra, limit=[victim])
        state = subprocess.run(["podman", "inspect", "-f", "{{.State.Running}}", victim], text=True,
                               capture_output=True, check=False).stdout.strip()
        assert state == "false", f"{victim} is back ({state}): the test's broken boot did not hold\n{describe(proc)}"
        assert proc.returncode != 0, describe(proc)
        note = failure_note(lab, victim)
        assert note.startswith("Reboot to load the new NVIDIA driver: the node went down for its reboot and did not "
                               "come back within nvidia_driver_reboot_timeout (30 s)"), note
        assert "Its new driver is installed: bring the machine back" in note and "run the rollout again" in note, note
        assert watcher.current[victim]["state"] == "upgrade-failed" and watcher.current[victim]["unschedulable"]
        assert report_of(fleet)[victim]["state"] == "upgrade-failed"
        assert lock_holder(lab) is None, "the lock is given back"
    finally:   # the machine brought back, as its operator would (labctl up starts it, at its new address)
        mount = subprocess.run(["podman", "mount", victim], text=True, capture_output=True, check=True).stdout.strip()
        subprocess.run(["sh", "-c", f"test -e {mount}/sbin/init || mv {mount}/sbin/init.gone {mount}/sbin/init"],
                       check=True)
        subprocess.run(["podman", "umount", victim], capture_output=True, check=False)
        lab.bring_back()
    wait_until(lambda: watcher.current[victim]["ready"], 120, f"{victim} to be Ready again")
    back = watcher.current[victim]["boot"]
    again = fleet["playbook"](extra=extra, limit=[victim])
    assert again.returncode == 0, describe(again)
    assert watcher.current[victim]["state"] == "upgrade-done" and not watcher.current[victim]["unschedulable"]
    assert watcher.current[victim]["driver"].startswith(f"{branch}."), watcher.current[victim]
    assert watcher.current[victim]["boot"] == back, "the driver was loaded: no second reboot"
    assert "pod-restart-required" in watcher.states_of(victim, start)


def test_a_lost_api_server_mid_rollout_leaves_the_node_cordoned_and_the_next_run_finishes_it(fleet):
    """The kube-apiserver killed once the node has rebooted into its new driver and waits for
    validation: the steps that need the API fail, and so does the rescue that would label the
    node upgrade-failed, so the node keeps its state label, stays cordoned, and the lock stays
    (no run can give it back without the API). Once the server is back, the next run takes the
    lock over (its run ended on this controller), resumes the node at its state without a
    second reboot, uncordons it and gives the lock back."""
    lab, watcher, victim = fleet["lab"], fleet["watcher"], fleet["current"]
    branch = 580 if watcher.current[victim]["driver"].startswith("615.") else 615
    extra = {"driver_upgrade_branch": branch, "driver_upgrade_serial": 1, "driver_upgrade_max_unavailable": 1,
             "driver_upgrade_ready_timeout": 30, "driver_upgrade_agent_timeout": 30,
             "driver_upgrade_smoke_test_timeout": 60}
    start = time.time()
    proc = fleet["playbook"](extra=extra, limit=[victim], background=True)
    try:
        reached = watcher.wait_for(victim, "validation-required", RUN_TIMEOUT, process=proc)
        assert reached, f"{victim} never reached validation-required: {watcher.changes_of(victim, start)}"
        lab.kill_api_server()
        # The Node is marked validation-required as it comes back; its wait may pass before the kill.
        at_kill = watcher.current[victim]["state"]
        output = proc.communicate(timeout=RUN_TIMEOUT)[0]
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
        lab.bring_back()
    assert proc.returncode != 0, output[-6000:]
    wait_until(lambda: watcher.current[victim]["ready"], 120, f"{victim} to be Ready again")
    assert at_kill in ("validation-required", "upgrade-done"), watcher.changes_of(victim, start)
    assert watcher.current[victim]["state"] == at_kill, watcher.changes_of(victim, start)
    assert watcher.current[victim]["unschedulable"], "the node stays cordoned"
    assert watcher.current[victim]["driver"].startswith(f"{branch}."), watcher.current[victim]
    held = lock_holder(lab)
    assert held and f"driver_upgrade to {branch}" in held, held
    rebooted = watcher.current[victim]["boot"]

    again = fleet["playbook"](extra=extra, limit=[victim])
    assert again.returncode == 0, describe(again)
    assert re.search(rf"Took over the rollout lock from {re.escape(held)}: its run \(pid {proc.pid} on this machine\) "
                     rf"has ended\.", flat(again.stdout)), describe(again)
    assert watcher.current[victim]["state"] == "upgrade-done" and not watcher.current[victim]["unschedulable"]
    assert watcher.current[victim]["boot"] == rebooted, "resumed at validation: no second reboot"
    assert lock_holder(lab) is None, "the lock is given back"


def test_a_repository_answering_404_fails_the_node_and_the_next_run_finishes_it(fleet):
    """The repository (a mirror missing a file) answering 404 for the branch's kernel module
    package: apt's install fails after the drain, the node is left cordoned and upgrade-failed
    with apt's 404 line in its reason, and the lock is given back. Once the file is served
    again, the next run starts the node over and finishes it."""
    lab, watcher, victim = fleet["lab"], fleet["watcher"], fleet["current"]
    branch = 580 if watcher.current[victim]["driver"].startswith("615.") else 615
    extra = {"driver_upgrade_branch": branch, "driver_upgrade_serial": 1, "driver_upgrade_max_unavailable": 1}
    folder = Path(subprocess.run(fleet["repo"] + ["build"], cwd=lab.root, env=lab.env, text=True, check=True,
                                 capture_output=True).stdout.split()[-1])
    hidden = [(deb, deb.with_name(deb.name + ".hidden")) for deb in folder.glob(f"*/*/nvidia-dkms-{branch}-open_*.deb")]
    assert hidden, f"no nvidia-dkms-{branch}-open package under {folder}"
    # The node fetches the package again (not from an earlier install's cache).
    subprocess.run(["podman", "exec", victim, "apt-get", "clean"], check=True, capture_output=True)
    start = time.time()
    try:
        for deb, aside in hidden:
            deb.rename(aside)
        proc = fleet["playbook"](extra=extra, limit=[victim])
    finally:
        for deb, aside in hidden:
            if aside.exists():
                aside.rename(deb)
    assert proc.returncode != 0, describe(proc)
    assert watcher.current[victim]["state"] == "upgrade-failed" and watcher.current[victim]["unschedulable"]
    note = failure_note(lab, victim)
    assert "404" in note and f"nvidia-dkms-{branch}-open" in note, note
    assert lock_holder(lab) is None, "the lock is given back"
    again = fleet["playbook"](extra=extra, limit=[victim])
    assert again.returncode == 0, describe(again)
    assert watcher.current[victim]["state"] == "upgrade-done" and not watcher.current[victim]["unschedulable"]
    assert watcher.current[victim]["driver"].startswith(f"{branch}."), watcher.current[victim]
    assert "upgrade-failed" in watcher.states_of(victim, start)
