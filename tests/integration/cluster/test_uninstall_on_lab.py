"""Uninstall on the converged lab, last in this directory (it takes KAI off):
in the guide's order it leaves nothing, and again changes nothing; with the
operator gone, uninstall reports the stuck finalizer and changes nothing, and
uninstall_force clears it; a `helm uninstall` cut short (its release left at
status uninstalling, which kubernetes.core.helm skips) is finished by the next
run. Each test runs alone too (-k): the second takes KAI off itself when the
first did not."""
import json
import re
import subprocess

import pytest

from cluster_helpers import (CONFIG, FINALIZER, NODE_CONDITION, kube_json, node_condition, releases, take_kai_off,
                             wait_for)
from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]


@pytest.fixture(scope="module", autouse=True)
def takes_kai_off(lab, kai_install):
    """Whatever the tests leave, the lab ends this module without KAI."""
    yield
    take_kai_off(lab)
    kai_install.installed = False


def leftovers(lab):
    """What an uninstall in the guide's order must not leave behind."""
    found = []
    if releases(lab):
        found.append(f"releases {releases(lab)}")
    if kube_json(lab, "get", "crd", CONFIG) and kube_json(lab, "get", CONFIG, "default"):
        found.append("GpuFractioningConfig default")
    daemonsets = kube_json(lab, "-n", "gpu-fractioning", "get", "daemonsets")
    if daemonsets and daemonsets["items"]:
        found.append("DaemonSets " + ", ".join(d["metadata"]["name"] for d in daemonsets["items"]))
    pods = kube_json(lab, "-n", "gpu-fractioning", "get", "pods", "-l", "app.kubernetes.io/component=mpsd")
    if pods and pods["items"]:
        found.append("mpsd pods")
    for node in lab.kube_nodes:
        if node_condition(lab, node) is not None:
            found.append(f"{NODE_CONDITION} on {node}")
    return found


def test_uninstall_in_order_leaves_nothing_and_a_rerun_changes_nothing(lab, converged):
    proc = lab.playbook("playbooks/uninstall.yml")
    assert proc.returncode == 0, describe(proc)
    assert leftovers(lab) == []
    assert kube_json(lab, "get", "config.kai.scheduler", "kai-config") is None
    # The purge: the queues, CRDs and namespaces Helm keeps, and the smoke test's record
    # (the converge's smoke test writes it; made here if an earlier test removed it).
    lab.kubectl("-n", "default", "create", "configmap", "smshare-smoke-test-record", check=False)
    assert kube_json(lab, "-n", "default", "get", "configmap", "smshare-smoke-test-record") is not None
    proc = lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_purge": True})
    assert proc.returncode == 0, describe(proc)
    crds = kube_json(lab, "get", "crd")["items"]
    assert [c["metadata"]["name"] for c in crds
            if re.search(r"kai\.scheduler|scheduling\.run\.ai", c["metadata"]["name"])] == []
    namespaces = {n["metadata"]["name"] for n in kube_json(lab, "get", "namespaces")["items"]}
    assert not namespaces & {"kai-scheduler", "gpu-fractioning", "kai-resource-reservation"}
    # The converge's smoke test recorded its passes; a purged cluster starts with none.
    assert kube_json(lab, "-n", "default", "get", "configmap", "smshare-smoke-test-record") is None
    again = lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_purge": True})
    assert again.returncode == 0, describe(again)
    assert recap(again.stdout)["changed"] == 0, describe(again)


def test_uninstall_reports_a_stuck_finalizer_and_force_clears_it(lab, kai_install):
    # Half an install: gpu-fractioning alone, on a cluster without KAI (the test above leaves it so;
    # run alone, this test takes KAI off first). The converge before built the images it needs.
    if releases(lab):
        take_kai_off(lab)
    kai_install.installed = False
    proc = lab.playbook("playbooks/gpu_fractioning.yml", extra_vars={"gpu_fractioning_check_kai_config": False})
    assert proc.returncode == 0, describe(proc)
    # The operator goes first, as when the chart is uninstalled before the config.
    lab.kubectl("-n", "gpu-fractioning", "scale", "deploy/gpu-fractioning", "--replicas=0")
    wait_for("the operator's pods to go", lambda: not kube_json(
        lab, "-n", "gpu-fractioning", "get", "pods", "-l", "app.kubernetes.io/name=gpu-fractioning")["items"])
    before = releases(lab)

    stuck = lab.playbook("playbooks/uninstall.yml")
    assert stuck.returncode != 0, describe(stuck)
    assert f"carries the finalizer {FINALIZER}" in stuck.stdout, describe(stuck)
    assert "uninstall_force=true" in stuck.stdout and "would hang forever" in stuck.stdout
    refused = lab.playbook("playbooks/uninstall.yml", "--tags", "uninstall_releases")
    assert refused.returncode != 0, describe(refused)
    assert "GpuFractioningConfig default still exists" in refused.stdout, describe(refused)
    config = kube_json(lab, "get", CONFIG, "default")
    assert config and "deletionTimestamp" not in config["metadata"]
    assert releases(lab) == before

    forced = lab.playbook("playbooks/uninstall.yml", extra_vars={"uninstall_force": True})
    assert forced.returncode == 0, describe(forced)
    assert kube_json(lab, "get", CONFIG, "default") is None
    assert releases(lab) == {}
    daemonsets = kube_json(lab, "-n", "gpu-fractioning", "get", "daemonsets")
    assert not daemonsets or not daemonsets["items"]
    # The operator marked its node conditions Unknown when it stopped; the role names them.
    for node in lab.kube_nodes:
        if node_condition(lab, node) is not None:
            assert node in forced.stdout, describe(forced)


# A release whose `helm uninstall --wait` is killed while it waits on an object's finalizer:
# its record stays at status uninstalling. The role's releases step (pointed at that release:
# the step is the same for both charts) finishes it; --check says so and changes nothing; the
# run after changes nothing.
def test_an_uninstall_cut_short_is_finished_by_the_next_run(lab, kai_install, tmp_path):
    if releases(lab):
        take_kai_off(lab)
    kai_install.installed = False
    namespace, name, hold = "smshare-uninstall-cut", "smshare-cut", "smshare.kai/test-hold"
    chart = tmp_path / "chart"
    (chart / "templates").mkdir(parents=True)
    (chart / "Chart.yaml").write_text("apiVersion: v2\nname: smshare-cut\nversion: 0.1.0\n")
    (chart / "templates" / "held.yaml").write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: held\n  finalizers: [%s]\ndata: {a: b}\n" % hold)
    helm = [str(lab.root / "lab" / "bin" / "helm"), "-n", namespace]
    lab.kubectl("create", "namespace", namespace, check=False)
    role = ["playbooks/uninstall.yml", "--tags", "uninstall_releases"]
    points_at_it = {"uninstall_gpu_fractioning_release_name": name, "uninstall_gpu_fractioning_namespace": namespace}
    try:
        subprocess.run([*helm, "install", name, str(chart)], env=lab.env, check=True, capture_output=True)
        cut = subprocess.Popen([*helm, "uninstall", name, "--wait", "--timeout", "600s"], env=lab.env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

        def status():
            out = subprocess.run([*helm, "list", "-a", "-o", "json"], env=lab.env, capture_output=True, text=True,
                                 check=True).stdout
            return {r["name"]: r["status"] for r in json.loads(out or "[]")}.get(name)

        try:
            wait_for("helm's uninstalling record", lambda: status() == "uninstalling", timeout=60, step=0.5)
            wait_for("helm to wait on the held ConfigMap", lambda: (kube_json(
                lab, "-n", namespace, "get", "configmap", "held") or {}).get("metadata", {}).get(
                    "deletionTimestamp"), timeout=60, step=0.5)
        finally:
            cut.kill()
            cut.wait()
        lab.kubectl("-n", namespace, "patch", "configmap", "held", "--type", "json",
                    "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]')
        assert status() == "uninstalling"

        check = lab.playbook(*role, "--check", "--diff", extra_vars=points_at_it)
        assert check.returncode == 0, describe(check)
        assert f"{namespace}/{name} is at status uninstalling" in " ".join(check.stdout.split()), describe(check)
        assert status() == "uninstalling"
        done = lab.playbook(*role, extra_vars=points_at_it)
        assert done.returncode == 0, describe(done)
        assert recap(done.stdout)["changed"] >= 1, describe(done)
        assert status() is None
        again = lab.playbook(*role, extra_vars=points_at_it)
        assert again.returncode == 0 and recap(again.stdout)["changed"] == 0, describe(again)
    finally:
        subprocess.run([*helm, "uninstall", name], env=lab.env, capture_output=True, check=False)
        lab.kubectl("-n", namespace, "patch", "configmap", "held", "--type", "json",
                    "-p", '[{"op": "remove", "path": "/metadata/finalizers"}]', check=False)
        lab.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
