"""site.yml's smoke test on change (the smoke_test role's smoke_test_run: on_change), on
the directory's one converge (conftest.py), before test_smoke_on_lab.py (whose last
test leaves KAI's reservation pods broken until the uninstall): the converge recorded its pass, so a
re-run tests nothing; what the fractions depend on changing (a GPU label, the
record gone, the pass too old) tests the node again, and says why."""
import json
import re

import pytest

from lab_helpers import describe

pytestmark = [pytest.mark.lab, pytest.mark.lab_nodes, pytest.mark.slow]

RECORD = "smshare-smoke-test-record"
PLAY = "playbooks/smoke_test.yml"
SELECTOR = "app.kubernetes.io/managed-by=smshare.kai.fraction_smoke_test"


def record(lab):
    out = lab.kubectl("-n", "default", "get", "configmap", RECORD, "-o", "json", check=False)
    if out.returncode != 0:
        return None
    return json.loads(json.loads(out.stdout)["data"]["record.json"])


def on_change(lab, *args, **extra_vars):
    proc = lab.playbook(PLAY, *args, extra_vars=dict({"smoke_test_run": "on_change"}, **extra_vars))
    assert proc.returncode == 0, describe(proc)
    return flat(proc.stdout)


def flat(text):
    """The output with the YAML callback's line wrapping undone."""
    return " ".join(text.split())


def test_the_converge_recorded_its_pass(lab, converged):
    node = lab.kube_nodes[0]
    entry = record(lab)["nodes"][node]
    assert len(entry["fingerprint"]) == 16 and entry["passed_at"] > 0


def test_a_converged_cluster_is_not_tested_again(lab, converged):
    # Settled first: an earlier test may have changed what the fractions depend on
    # (test_cluster_on_lab.py's killed helm leaves KAI at a new revision, rightly tested again).
    on_change(lab)
    before = record(lab)
    out = on_change(lab)
    node = lab.kube_nodes[0]
    assert re.search(r"%s: not tested, passed [0-9.]+ h ago with the same node, releases and inputs" % node, out), out
    assert "No node needed the smoke test" in out
    assert "Start the smoke test" not in out
    assert record(lab) == before   # nothing ran, nothing recorded
    rerun = lab.playbook("site.yml", "--tags", "smoke")
    assert rerun.returncode == 0 and "not tested, passed" in flat(rerun.stdout), describe(rerun)


def test_check_mode_predicts_only_the_nodes_it_would_test(lab, converged):
    out = on_change(lab, "--check")
    assert "not tested, passed" in out and "Predict the smoke test" in out
    assert "changed=0" in out.rsplit("PLAY RECAP", maxsplit=1)[-1]


def test_a_changed_gpu_label_tests_the_node_again(lab, converged):
    node = lab.kube_nodes[0]
    before = record(lab)["nodes"][node]
    lab.kubectl("label", "node", node, "nvidia.com/mig.strategy=single", "--overwrite")
    try:
        out = on_change(lab)
    finally:
        lab.kubectl("label", "node", node, "nvidia.com/mig.strategy-", check=False)
    assert "%s: tested, changed since its last pass" % node in out
    assert "The smoke test passed on %s" % node in out
    after = record(lab)["nodes"][node]
    assert after["fingerprint"] != before["fingerprint"] and after["passed_at"] > before["passed_at"]
    assert lab.kubectl("-n", "default", "get", "pods", "-l", SELECTOR, "-o", "name").stdout.split() == []


def test_a_lost_record_or_an_old_pass_tests_the_node_again(lab, converged):
    node = lab.kube_nodes[0]
    # The record lost first: whatever an earlier test changed since the node's pass, it is
    # tested and recorded as it is now (two runs of the smoke test, not three).
    lab.kubectl("-n", "default", "delete", "configmap", RECORD, "--ignore-not-found")
    out = on_change(lab)
    assert "%s: tested, no recorded pass" % node in out
    assert node in record(lab)["nodes"]
    out = on_change(lab, smoke_test_max_age_hours=0)
    assert re.search(r"%s: tested, last pass [0-9.]+ h ago, older than 0.0 h" % node, out), out


@pytest.mark.parametrize("extra, words", [
    ({"smoke_test_run": "sometimes"}, "smoke_test_run"),
    ({"smoke_test_max_age_hours": "-1"}, "smoke_test_max_age_hours"),
    ({"smoke_test_releases": "kai-scheduler"}, "smoke_test_releases"),
    ({"smoke_test_record_name": "Not_A_Name"}, "smoke_test_record_name"),
])
def test_bad_on_change_inputs_are_refused_before_anything_runs(lab, converged, extra, words):
    before = record(lab)
    proc = lab.playbook(PLAY, extra_vars=extra)
    assert proc.returncode == 2, describe(proc)
    assert words in flat(proc.stdout) and "Start the smoke test" not in proc.stdout
    assert record(lab) == before
