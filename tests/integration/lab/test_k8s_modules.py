"""kubernetes.core's k8s and k8s_info against the lab's real apiserver."""
import json

import pytest

from lab_helpers import describe, recap

pytestmark = [pytest.mark.lab, pytest.mark.second_lab]
PLAY = "tests/integration/lab/playbooks/k8s_roundtrip.yml"
NS = "lab-k8s-roundtrip"


def configmap_value(lab):
    proc = lab.kubectl("-n", NS, "get", "configmap", "lab-values", "-o", "json", check=False)
    return json.loads(proc.stdout)["data"]["value"] if proc.returncode == 0 else None


@pytest.fixture(scope="module")
def roundtrip(lab):
    yield lab
    lab.playbook(PLAY, extra_vars={"lab_state": "absent"})


def test_create_then_rerun_is_unchanged(roundtrip):
    lab = roundtrip
    first = lab.playbook(PLAY, extra_vars={"lab_value": "one"})
    assert first.returncode == 0, describe(first)
    assert recap(first.stdout)["changed"] >= 4, describe(first)
    assert configmap_value(lab) == "one"
    widget = json.loads(lab.kubectl("-n", NS, "get", "widgets.lab.smshare.io", "first", "-o", "json").stdout)
    assert widget["spec"]["size"] == "one"
    again = lab.playbook(PLAY, extra_vars={"lab_value": "one"})
    assert again.returncode == 0, describe(again)
    assert recap(again.stdout)["changed"] == 0, describe(again)


def test_check_mode_with_diff_changes_nothing(roundtrip):
    lab = roundtrip
    assert lab.playbook(PLAY, extra_vars={"lab_value": "one"}).returncode == 0
    checked = lab.playbook(PLAY, "--check", "--diff", extra_vars={"lab_value": "two"})
    assert checked.returncode == 0, describe(checked)
    assert recap(checked.stdout)["changed"] == 2, describe(checked)   # Widget and ConfigMap
    assert '"value": "two"' in checked.stdout or "value: two" in checked.stdout, describe(checked)
    assert configmap_value(lab) == "one"


def test_update_changes_the_cluster(roundtrip):
    lab = roundtrip
    changed = lab.playbook(PLAY, extra_vars={"lab_value": "three"})
    assert changed.returncode == 0, describe(changed)
    assert recap(changed.stdout)["changed"] == 2, describe(changed)
    assert configmap_value(lab) == "three"
    assert "LAB_VALUE=three" in changed.stdout


def test_k8s_info_wait_times_out_on_a_condition_that_never_comes(lab):
    """k8s_info wait really waits: a condition that cannot be met fails after the timeout."""
    play = "tests/integration/lab/playbooks/wait_never.yml"
    proc = lab.playbook(play)
    assert proc.returncode != 0, describe(proc)
    assert recap(proc.stdout)["failed"] == 1


def test_absent_removes_namespace_through_the_controller_manager(roundtrip):
    lab = roundtrip
    assert lab.playbook(PLAY).returncode == 0
    gone = lab.playbook(PLAY, extra_vars={"lab_state": "absent"})
    assert gone.returncode == 0, describe(gone)
    assert lab.kubectl("get", "namespace", NS, check=False).returncode != 0
    assert lab.kubectl("get", "crd", "widgets.lab.smshare.io", check=False).returncode != 0
