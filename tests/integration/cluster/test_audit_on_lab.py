"""playbooks/audit.yml on the directory's one converge (conftest.py) plus the
queues play, then

no drift (exit 0, reports written, the cluster and the nodes unchanged by a
normal run) -> for each kind of drift (driver, release, image, queue): make
it by hand, assert the audit fails naming it (output, JSON and Markdown), undo
it -> no drift again.
"""
import json
import subprocess
import time

import pytest

from cluster_helpers import kube_json
from lab_helpers import describe, on_node, recap

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]

AUDIT = "playbooks/audit.yml"
PIN = "nvidia-driver-pinning-615"
PROBE_POD = "smshare-audit-foreign"


def helm(lab, *args):
    return subprocess.run([str(lab.root / "lab" / "bin" / "helm"), *args], env=lab.env,
                          capture_output=True, text=True, check=False)


def state(lab):
    """What a read-only run must leave as it was: releases' revisions, the queues'
    and the two namespaces' pods' resource versions, each GPU node's package list."""
    found = {}
    for namespace in ("kai-scheduler", "gpu-fractioning"):
        out = helm(lab, "list", "-a", "-o", "json", "-n", namespace).stdout
        found["releases/" + namespace] = sorted((r["name"], r["revision"], r["status"]) for r in json.loads(out or "[]"))
        pods = kube_json(lab, "-n", namespace, "get", "pods")["items"]
        found["pods/" + namespace] = sorted((p["metadata"]["name"], p["metadata"]["resourceVersion"]) for p in pods)
    queues = kube_json(lab, "get", "queues.scheduling.run.ai")["items"]
    found["queues"] = sorted((q["metadata"]["name"], q["metadata"]["resourceVersion"]) for q in queues)
    for node in lab.gpu_nodes:
        found["dpkg/" + node] = on_node(node, "dpkg-query", "-W").stdout
    return found


def audit(lab, tmp_path, name):
    folder = tmp_path / name
    started = time.monotonic()
    proc = lab.playbook(AUDIT, extra_vars={"smshare_audit_report_dir": str(folder)})
    print(f"\n[audit] {name}: {time.monotonic() - started:.0f} s")
    report = json.loads((folder / "audit.json").read_text()) if (folder / "audit.json").is_file() else None
    markdown = (folder / "audit.md").read_text() if (folder / "audit.md").is_file() else ""
    return proc, report, markdown


def assert_drift(proc, report, markdown, area, obj, field, wanted, found):
    """The run fails, and the one finding is named in its output, the JSON and the Markdown."""
    assert proc.returncode == 2, describe(proc)
    assert "DRIFT: 1 finding(s)" in proc.stdout, describe(proc)
    assert report["drift"] is True and report["counts"][area] == 1, report
    assert len(report["findings"]) == 1, report["findings"]
    row = report["findings"][0]
    assert (row["area"], row["object"], row["field"], row["wanted"], row["found"]) == (area, obj, field, wanted, found), row
    line = f"{area} {row['host']} {obj} {field}: wanted"
    assert line in proc.stdout, describe(proc)
    assert f"## {area}" in markdown and f"| {obj} | {field} |" in markdown, markdown


@pytest.fixture(scope="module")
def with_queues(lab, kai_install):
    """The inventory's queues on the converged lab (the audit compares them too)."""
    kai_install.ensure(lab)
    proc = lab.playbook("playbooks/queues.yml")
    assert proc.returncode == 0, describe(proc)
    yield
    # Uninstall's purge refuses CRDs that other queues still use: these go first.
    lab.kubectl("delete", "queues.scheduling.run.ai", "-l", "app.kubernetes.io/managed-by=smshare.kai",
                "--wait=true", "--timeout=120s", check=False)


def test_no_drift_after_a_converge_and_the_audit_changes_nothing(lab, with_queues, tmp_path):
    before = state(lab)
    proc, report, markdown = audit(lab, tmp_path, "clean")
    assert proc.returncode == 0, describe(proc)
    for host in [*lab.gpu_nodes, "localhost"]:
        counts = recap(proc.stdout, host)
        assert counts["failed"] == 0, describe(proc)
    # Only the report files are written (two files, on the controller).
    assert recap(proc.stdout, "localhost")["changed"] <= 3, describe(proc)
    for node in lab.gpu_nodes:
        assert recap(proc.stdout, node)["changed"] == 0, describe(proc)
    assert "No drift" in proc.stdout
    assert report["drift"] is False and report["findings"] == [], report
    assert report["counts"] == {"driver": 0, "release": 0, "image": 0, "queue": 0}
    assert sorted(report["checked"]["gpu_nodes"]) == sorted(lab.gpu_nodes)
    assert "No drift" in markdown
    assert state(lab) == before
    # Without a report folder, a run changes nothing anywhere.
    proc = lab.playbook(AUDIT)
    assert proc.returncode == 0, describe(proc)
    for host in [*lab.gpu_nodes, "localhost"]:
        assert recap(proc.stdout, host)["changed"] == 0, describe(proc)
    assert state(lab) == before


def test_driver_drift_is_named(lab, with_queues, tmp_path):
    node = lab.gpu_nodes[0]
    removed = on_node(node, "dpkg", "--remove", "--force-depends", PIN)
    assert removed.returncode == 0, removed.stderr
    try:
        proc, report, markdown = audit(lab, tmp_path, "driver")
        assert_drift(proc, report, markdown, "driver", PIN, "installed", "installed", "(absent)")
        assert report["findings"][0]["host"] == node
    finally:
        back = on_node(node, "apt-get", "install", "-y", "-q", "--no-install-recommends", PIN)
        assert back.returncode == 0, back.stdout + back.stderr


def test_release_drift_is_named(lab, with_queues, tmp_path):
    chart = next((lab.state_dir / "charts").glob("kai-scheduler-*/deployments/kai-scheduler"))
    changed = helm(lab, "upgrade", "kai-scheduler", str(chart), "-n", "kai-scheduler", "--reuse-values",
                   "--set", "smshareAuditProbe=by-hand")
    assert changed.returncode == 0, changed.stdout + changed.stderr
    try:
        proc, report, markdown = audit(lab, tmp_path, "release")
        assert_drift(proc, report, markdown, "release", "kai-scheduler", "values.smshareAuditProbe",
                     "(absent)", "by-hand")
    finally:
        back = helm(lab, "upgrade", "kai-scheduler", str(chart), "-n", "kai-scheduler", "--reuse-values",
                    "--set", "smshareAuditProbe=null")
        assert back.returncode == 0, back.stdout + back.stderr


def test_image_drift_is_named(lab, with_queues, tmp_path):
    manifest = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": PROBE_POD, "namespace": "gpu-fractioning"},
                "spec": {"containers": [{"name": "main", "image": "localhost/smshare-lab/tools:1",
                                         "imagePullPolicy": "Never", "command": ["sleep", "3600"]}],
                         "terminationGracePeriodSeconds": 0}}
    lab.kubectl("apply", "-f", "-", input_text=json.dumps(manifest))
    try:
        lab.kubectl("-n", "gpu-fractioning", "wait", "--for=condition=Ready", f"pod/{PROBE_POD}", "--timeout=120s")
        proc, report, markdown = audit(lab, tmp_path, "image")
        assert_drift(proc, report, markdown, "image", f"gpu-fractioning/{PROBE_POD}/main", "image",
                     report["findings"][0]["wanted"], "localhost/smshare-lab/tools:1")
        assert report["findings"][0]["wanted"].endswith("/kai-gpu-fractioning/<service>:"
                                                        + report["findings"][0]["wanted"].rsplit(":", 1)[1])
    finally:
        lab.kubectl("-n", "gpu-fractioning", "delete", "pod", PROBE_POD, "--wait=true", "--timeout=120s",
                    check=False)


def test_queue_drift_is_named(lab, with_queues, tmp_path):
    patch = {"spec": {"resources": {"gpu": {"limit": 1}}}}
    lab.kubectl("patch", "queues.scheduling.run.ai", "inference", "--type", "merge", "-p", json.dumps(patch))
    try:
        proc, report, markdown = audit(lab, tmp_path, "queue")
        assert_drift(proc, report, markdown, "queue", "inference", "spec.resources.gpu.limit", 2, 1)
    finally:
        patch["spec"]["resources"]["gpu"]["limit"] = 2
        lab.kubectl("patch", "queues.scheduling.run.ai", "inference", "--type", "merge", "-p", json.dumps(patch))


def test_no_drift_once_every_drift_is_undone(lab, with_queues, tmp_path):
    proc, report, _markdown = audit(lab, tmp_path, "restored")
    assert proc.returncode == 0, describe(proc)
    assert report["findings"] == [], report["findings"]
