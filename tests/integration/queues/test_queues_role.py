"""The queues role against the lab's real API server with the Queue CRD:
a bad tree refused before any change, check mode, converge, changed=0 re-run,
an update seen in --diff, prune (only what the role manages, never a queue a
live pod still uses), a run killed or losing its API server part way."""
import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
from lab_helpers import describe, recap, signal_tree  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.second_lab]
HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
PLAY = "playbooks/queues.yml"
CRD = HERE / "files" / "queue-crd.yaml"
NS = "qt-workloads"
MANAGED = "app.kubernetes.io/managed-by=smshare.kai"

TREE = [
    {"name": "qt-research", "display_name": "Research", "resources": {
        "gpu": {"quota": 2, "limit": -1}, "cpu": {"quota": 8000, "limit": 16000}}},
    {"name": "qt-ml", "display_name": "ML", "parent": "qt-research", "priority": 200,
     "resources": {"gpu": {"quota": 1.5, "limit": 2, "over_quota_weight": 2}}},
    {"name": "qt-cv", "parent": "qt-research", "resources": {"gpu": {"quota": 0.5}}},
    # a child of a queue this inventory does not manage (like the chart's default-parent-queue)
    {"name": "qt-guest", "parent": "qt-external"},
]


def flat(text):
    """Output as one line: the YAML callback folds long strings and doubles single quotes."""
    return " ".join(text.split()).replace("''", "'")


def queues(lab):
    """{name: object} of the lab's Queue objects whose names start with qt-."""
    items = json.loads(lab.kubectl("get", "queues.scheduling.run.ai", "-o", "json").stdout)["items"]
    return {q["metadata"]["name"]: q for q in items if q["metadata"]["name"].startswith("qt-")}


def converge(lab, tree, *args, prune=False, workload_queues=()):
    extra = {"smshare_queues": tree, "smshare_queues_prune": prune, "smshare_workload_queues": list(workload_queues)}
    return lab.playbook(PLAY, *args, extra_vars=extra)


@pytest.fixture(scope="module")
def cluster(lab):
    had_crd = lab.kubectl("get", "crd", "queues.scheduling.run.ai", check=False).returncode == 0
    if not had_crd:
        lab.kubectl("apply", "-f", str(CRD))
        lab.kubectl("wait", "--for=condition=Established", "crd/queues.scheduling.run.ai", "--timeout=30s")
    lab.kubectl("delete", "queues.scheduling.run.ai", "-l", MANAGED, "--ignore-not-found")
    # a queue someone else created: the role may hang queues under it but never prunes it
    lab.kubectl("apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "scheduling.run.ai/v2", "kind": "Queue", "metadata": {"name": "qt-external"},
        "spec": {"resources": {"gpu": {"quota": -1, "limit": -1}}}}))
    lab.kubectl("create", "namespace", NS, check=False)
    yield lab
    lab.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
    lab.kubectl("delete", "queues.scheduling.run.ai", "-l", MANAGED, "--ignore-not-found")
    lab.kubectl("delete", "queues.scheduling.run.ai", "qt-external", "--ignore-not-found")
    if not had_crd:
        lab.kubectl("delete", "crd", "queues.scheduling.run.ai", "--ignore-not-found")


def test_a_bad_tree_is_refused_before_any_change(cluster):
    bad = TREE + [
        {"name": "qt-a", "parent": "qt-b"}, {"name": "qt-b", "parent": "qt-a"},
        {"name": "qt-lost", "parent": "qt-nowhere"},
        {"name": "qt-tight", "resources": {"gpu": {"quota": 2, "limit": 1}}},
        {"name": "qt-burst", "resources": {"cpu": {"quota": -1}}},
    ]
    bad[1] = dict(bad[1], resources={"gpu": {"quota": 1.8, "limit": 2}})   # 1.8 + 0.5 > 2
    proc = converge(cluster, bad, workload_queues=["qt-research"])
    assert proc.returncode != 0, describe(proc)
    out = proc.stdout
    for message in (
            "queue qt-a: parentQueue forms a cycle: qt-a -> qt-b -> qt-a",
            "queue qt-lost: parent 'qt-nowhere' does not exist: it is neither declared nor in the cluster",
            "queue qt-tight: resources.gpu: limit 1 is below the quota 2 (GPUs)",
            "queue qt-research: resources.gpu: the child queues' quotas add up to 2.3 (qt-cv 0.5, qt-ml 1.8), "
            "more than this parent's quota 2 (GPUs)",
            "queue qt-research: workloads name this queue (the inventory) but it has child queues (qt-cv, qt-ml)",
            "queue qt-burst: resources.cpu: quota -1 means UNLIMITED",
            "The queue tree has 5 problem(s), listed above",
            "Nothing was changed."):
        assert message in flat(out), (message, describe(proc))
    assert recap(out)["changed"] == 0
    assert set(queues(cluster)) == {"qt-external"}


def test_check_mode_creates_nothing_then_converge_then_rerun_is_unchanged(cluster):
    checked = converge(cluster, TREE, "--check", "--diff")
    assert checked.returncode == 0, describe(checked)
    assert recap(checked.stdout)["changed"] == 1, describe(checked)
    assert "quota: 1.5" in checked.stdout
    assert set(queues(cluster)) == {"qt-external"}

    first = converge(cluster, TREE)
    assert first.returncode == 0, describe(first)
    found = queues(cluster)
    assert set(found) == {"qt-external", "qt-research", "qt-ml", "qt-cv", "qt-guest"}
    ml = found["qt-ml"]
    assert ml["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "smshare.kai"}
    assert ml["spec"] == {"displayName": "ML", "parentQueue": "qt-research", "priority": 200, "resources": {
        "gpu": {"quota": 1.5, "limit": 2, "overQuotaWeight": 2},
        "cpu": {"quota": 0, "limit": -1, "overQuotaWeight": 1},
        "memory": {"quota": 0, "limit": -1, "overQuotaWeight": 1}}}
    assert found["qt-guest"]["spec"]["parentQueue"] == "qt-external"
    assert "5 queue(s): qt-cv (in qt-research), qt-external, qt-guest (in qt-external), qt-ml (in qt-research), " \
           "qt-research." in flat(first.stdout)

    again = converge(cluster, TREE, "--diff")
    assert again.returncode == 0, describe(again)
    assert recap(again.stdout)["changed"] == 0, describe(again)


# The tests below run in file order on the state the one before left (one
# converge, many assertions: each playbook run costs seconds).
def test_an_update_shows_in_diff_and_a_dropped_queue_stays_without_prune(cluster):
    changed = [dict(q) for q in TREE if q["name"] != "qt-cv"]
    changed[1] = {k: v for k, v in changed[1].items() if k != "display_name"}
    changed[1]["resources"] = {"gpu": {"quota": 1, "limit": 2, "over_quota_weight": 2}}
    applied = converge(cluster, changed, "--diff")
    assert applied.returncode == 0, describe(applied)
    assert "-                quota: 1.5" in applied.stdout and "+                quota: 1" in applied.stdout, \
        describe(applied)
    assert "-        displayName: ML" in applied.stdout
    found = queues(cluster)
    assert found["qt-ml"]["spec"]["resources"]["gpu"]["quota"] == 1 and "displayName" not in found["qt-ml"]["spec"]
    assert "qt-cv" in found


def test_prune_never_removes_a_queue_a_pod_uses(cluster):
    cluster.kubectl("-n", NS, "apply", "-f", "-", input_text=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "uses-cv", "labels": {"kai.scheduler/queue": "qt-cv"}},
        "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "none"}]}}))
    try:
        refused = converge(cluster, [q for q in TREE if q["name"] != "qt-cv"], prune=True)
    finally:
        cluster.kubectl("-n", NS, "delete", "pod", "uses-cv", "--wait=false")
    assert refused.returncode != 0, describe(refused)
    assert "queue qt-cv: workloads name this queue (pod %s/uses-cv) but it would be pruned" % NS \
        in flat(refused.stdout)
    assert "qt-cv" in queues(cluster)


def test_prune_removes_only_the_managed_queues_the_list_dropped(cluster):
    pruned = converge(cluster, [q for q in TREE if q["name"] != "qt-cv"], "--diff", prune=True)
    assert pruned.returncode == 0, describe(pruned)
    assert "Pruned: qt-cv." in pruned.stdout
    assert set(queues(cluster)) == {"qt-external", "qt-research", "qt-ml", "qt-guest"}


def test_prune_with_an_empty_list_is_refused(cluster):
    proc = converge(cluster, [], prune=True)
    assert proc.returncode != 0
    assert "would delete every queue this role manages" in flat(proc.stdout)


def test_workload_lint_checks_live_objects_against_the_clusters_queues(cluster):
    """The documented short command on live objects: controller-owned ReplicaSets and
    pods are checked through their Deployment; what KAI's binder wrote on a bound pod
    is not a finding."""
    cluster.kubectl("-n", NS, "apply", "-f", "-", input_text=json.dumps({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "bad"}, "spec": {
            "replicas": 1, "selector": {"matchLabels": {"app": "bad"}},
            "template": {"metadata": {"labels": {"app": "bad", "kai.scheduler/queue": "qt-research"},
                                      "annotations": {"gpu-fraction": "1.5"}},
                         "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "c", "image": "x"}]}}}},
        {"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": "bound", "labels": {"kai.scheduler/queue": "qt-ml"},
            "annotations": {"gpu-fraction": "0.5", "nvidia.com/container.c.gpus.devices": "GPU-0"}},
         "spec": {"schedulerName": "kai-scheduler", "nodeName": "qt-no-such-node",
                  "containers": [{"name": "c", "image": "x"}]}}]}))
    args = {"namespaces": [NS], "queues_from_cluster": True, "kubeconfig": str(cluster.kubeconfig)}
    proc = subprocess.run(["ansible", "localhost", "-m", "smshare.kai.workload_lint", "-a", json.dumps(args)],
                          cwd=REPO, env=dict(cluster.env, ANSIBLE_CALLBACK_RESULT_FORMAT="json"),
                          text=True, capture_output=True, check=False)
    assert proc.returncode == 2, describe(proc)
    result = json.loads(proc.stdout.split("=>", 1)[1])
    assert result["failure"] == "violations"
    assert sorted((f["object"], f["rule"], f["field"]) for f in result["findings"]) == [
        ("Deployment %s/bad" % NS, "fraction-runs-as-root", "spec.template.spec.securityContext.runAsNonRoot"),
        ("Deployment %s/bad" % NS, "gpu-fraction-range", "spec.template.metadata.annotations[gpu-fraction]"),
        ("Deployment %s/bad" % NS, "queue-not-leaf", "spec.template.metadata.labels[kai.scheduler/queue]"),
        ("Pod %s/bound" % NS, "fraction-runs-as-root", "spec.securityContext.runAsNonRoot")]
    assert result["summary"].startswith("2 errors, 2 warnings in ")
    cluster.kubectl("-n", NS, "delete", "deployment", "bad", "--wait=false")
    cluster.kubectl("-n", NS, "delete", "pod", "bound", "--wait=false", "--grace-period=0", "--force")


CONFIG_CRD = REPO / "lab" / "standin" / "forks" / "kai-scheduler" / "deployments" / "kai-scheduler" / "crds" / \
    "kai.scheduler_configs.yaml"


def lint_module(lab, args):
    proc = subprocess.run(["ansible", "localhost", "-m", "smshare.kai.workload_lint", "-a", json.dumps(args)],
                          cwd=REPO, env=dict(lab.env, ANSIBLE_CALLBACK_RESULT_FORMAT="json"),
                          text=True, capture_output=True, check=False)
    return proc, json.loads(proc.stdout.split("=>", 1)[1])


def test_workload_lint_judges_against_the_sharing_mode_the_cluster_runs(cluster):
    """sharing_mode_from_cluster reads kai-config (the KAI fork's Config CRD, cluster-scoped):
    a fraction asked of a cluster whose kai-config says Disabled is an error, a mode
    written in the wrong case is named, and no kai-config is a named failure."""
    fraction = {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": "half", "namespace": NS, "labels": {"kai.scheduler/queue": "qt-ml"},
        "annotations": {"gpu-fraction": "0.5"}}, "spec": {
        "schedulerName": "kai-scheduler", "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
        "containers": [{"name": "c", "image": "x"}]}}
    args = {"objects": [fraction], "sharing_mode_from_cluster": True, "kubeconfig": str(cluster.kubeconfig)}
    had_crd = cluster.kubectl("get", "crd", "configs.kai.scheduler", check=False).returncode == 0
    saved = cluster.kubectl("get", "configs.kai.scheduler", "kai-config", "-o", "json", check=False) \
        if had_crd else None
    saved = json.loads(saved.stdout) if saved is not None and saved.returncode == 0 else None
    try:
        if not had_crd:
            cluster.kubectl("apply", "-f", str(CONFIG_CRD))
            cluster.kubectl("wait", "--for=condition=Established", "crd/configs.kai.scheduler", "--timeout=30s")
        cluster.kubectl("delete", "configs.kai.scheduler", "kai-config", "--ignore-not-found")
        proc, result = lint_module(cluster, args)
        assert proc.returncode == 2 and result["failure"] == "cluster", describe(proc)
        assert "the cluster has no kai-config (kai.scheduler/v1 Config)" in result["msg"], result["msg"]
        for mode, words in (("Disabled", None), ("nvfractions", "'nvfractions', not one of"),
                            ("NvFractions", None)):
            cluster.kubectl("apply", "-f", "-", input_text=json.dumps({
                "apiVersion": "kai.scheduler/v1", "kind": "Config", "metadata": {"name": "kai-config"},
                "spec": {"global": {"gpuSharingMode": mode}}}))
            proc, result = lint_module(cluster, args)
            if words:
                assert result["failure"] == "cluster" and words in result["msg"], describe(proc)
            elif mode == "Disabled":
                assert result["failure"] == "violations", describe(proc)
                assert [f["rule"] for f in result["findings"]] == ["sharing-mode"] and result["sharing_mode"] == mode
            else:
                assert proc.returncode == 0 and result["findings"] == [] and result["sharing_mode"] == mode, \
                    describe(proc)
        # The inventory's mode and the cluster's are one or the other.
        proc, result = lint_module(cluster, dict(args, sharing_mode="NvFractions"))
        assert "give the mode or read it from the cluster, not both" in result["msg"], describe(proc)
    finally:
        cluster.kubectl("delete", "configs.kai.scheduler", "kai-config", "--ignore-not-found")
        if saved:
            for key in ("resourceVersion", "uid", "creationTimestamp", "generation", "managedFields"):
                saved["metadata"].pop(key, None)
            saved.pop("status", None)
            cluster.kubectl("apply", "-f", "-", input_text=json.dumps(saved))
        if not had_crd:
            cluster.kubectl("delete", "crd", "configs.kai.scheduler", "--ignore-not-found")


# A tree of its own, long enough that a run can be stopped part way: one parent, then its children.
INTERRUPTED = [{"name": "qt-int-root", "resources": {"gpu": {"quota": 12}}}] + [
    {"name": "qt-int-%02d" % i, "parent": "qt-int-root", "resources": {"gpu": {"quota": 1}}} for i in range(12)]


def wait_for_queues(lab, proc, prefix, count, timeout=120):
    """Wait until `count` queues named `prefix`* exist (the play is part way); fails if the play ends first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len([n for n in queues(lab) if n.startswith(prefix)]) >= count:
            return
        assert proc.poll() is None, "the play ended before it was stopped:\n" + proc.stdout.read()
        time.sleep(0.2)
    raise AssertionError("no %d queues %s* within %d s" % (count, prefix, timeout))


@pytest.mark.parametrize("fault", ["killed-play", "api-server-lost"])
def test_a_run_stopped_part_way_leaves_a_consistent_tree_the_next_run_completes(cluster, fault):
    names = [q["name"] for q in INTERRUPTED]
    try:
        run = cluster.start_playbook(PLAY, extra_vars={"smshare_queues": INTERRUPTED, "smshare_queues_prune": False,
                                                       "smshare_workload_queues": []})
        wait_for_queues(cluster, run, "qt-int-", 2)
        if fault == "killed-play":   # the play and its workers at once, as a lost controller leaves them
            signal_tree(run.pid, signal.SIGKILL)
            out = run.communicate(timeout=60)[0]
        else:
            cluster.kill_api_server()
            try:
                out = run.communicate(timeout=600)[0]
            finally:
                cluster.bring_back()
            assert run.returncode != 0, out
            said = flat(out)
            assert "The queues were not all applied." in said and "kubectl get --raw /readyz" in said, out
            applied = said.split("Applied (parents first, so the cluster's tree stays consistent): ", 1)[1]
            applied, not_applied = applied.split(". Not applied: ", 1)
            applied, not_applied = applied.split(", "), not_applied.split(". ", 1)[0].split(", ")
            # What the message says is what the cluster holds.
            assert applied[0] == "qt-int-root" and sorted(applied + not_applied) == sorted(names), said
        left = {n: q for n, q in queues(cluster).items() if n.startswith("qt-int-")}
        if fault == "api-server-lost":
            assert sorted(left) == sorted(applied), (left, said)
        # Parents first: whatever was left has its parent, and every queue was written whole.
        assert "qt-int-root" in left and 2 <= len(left) < len(names), out
        for queue in left.values():
            assert queue["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "smshare.kai"}
            assert queue["spec"]["resources"]["gpu"]["quota"] in (1, 12)
        again = converge(cluster, INTERRUPTED)
        assert again.returncode == 0, describe(again)
        assert recap(again.stdout)["changed"] >= 1, describe(again)
        assert sorted(n for n in queues(cluster) if n.startswith("qt-int-")) == sorted(names)
        settled = converge(cluster, INTERRUPTED)
        assert settled.returncode == 0 and recap(settled.stdout)["changed"] == 0, describe(settled)
    finally:
        cluster.kubectl("delete", "queues.scheduling.run.ai", *[n for n in names if n != "qt-int-root"],
                        "--ignore-not-found", check=False)
        cluster.kubectl("delete", "queues.scheduling.run.ai", "qt-int-root", "--ignore-not-found", check=False)
