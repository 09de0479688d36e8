"""The pilot in the lab, both ways: KAI's stand-in chart installed from the lab
registry over oci:// at a pinned version, its stand-in scheduler placing the
half-GPU pod and holding the gang back (the pilot passes), then the same
scheduler with its gang rule broken (the pilot fails at step 4 and names the
pods that started). Both runs must leave the cluster as they found it. Last, a
second pilot is refused while one runs, and a pilot killed mid-install is
cleaned up by the next run."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
from lab_helpers import describe  # noqa: E402
from secret_search import found_in_files, found_in_text, kept_env, secret_forms, task_ran  # noqa: E402

pytestmark = [pytest.mark.lab, pytest.mark.second_lab, pytest.mark.lab_nodes, pytest.mark.slow]
REPO = Path(__file__).resolve().parents[3]
PLAY = "playbooks/pilot.yml"
KNOBS = ("-n", "smshare-lab", "configmap", "standin-knobs")


def flat(text):
    return " ".join(text.split()).replace("''", "'")


def kai_leftovers(lab):
    """What of KAI or the pilot is in the cluster: CRDs, namespaces, cluster roles."""
    crds = [n for n in lab.kubectl("get", "crd", "-o", "name").stdout.split()
            if n.endswith(".kai.scheduler") or n.endswith(".scheduling.run.ai")]
    namespaces = [n for n in lab.kubectl("get", "ns", "-o", "name").stdout.split()
                  if n in ("namespace/kai-scheduler", "namespace/gpu-trial", "namespace/kai-resource-reservation")]
    return crds + namespaces


def knob(lab, key, value):
    patch = {"data": {key: value}} if value is not None else [{"op": "remove", "path": "/data/" + key.replace("/", "~1")}]
    kind = "merge" if value is not None else "json"
    lab.kubectl("patch", *KNOBS, "--type", kind, "-p", json.dumps(patch), check=value is not None)


@pytest.fixture(scope="module")
def pilot_lab(lab):
    if not lab.node_tier:
        pytest.fail("the pilot test needs the node tier (lab/labctl up --nodes)")
    assert not kai_leftovers(lab), "the lab already has KAI: %s" % kai_leftovers(lab)
    images = lab.playbook("playbooks/images.yml")   # the stand-in images at the forks' tag (no-op when built)
    assert images.returncode == 0, describe(images)
    pushed = subprocess.run([sys.executable, str(REPO / "lab/standin/charts/push-kai-release.py")],
                            env=lab.env, text=True, capture_output=True, check=False)
    assert pushed.returncode == 0, pushed.stderr
    lab.kubectl("get", *KNOBS)  # labctl up --nodes makes it
    yield lab
    knob(lab, "kai-scheduler.gang", None)
    lab.playbook(PLAY, "--tags", "kai_pilot_cleanup")


def test_bad_input_is_refused_before_any_change(pilot_lab):
    proc = pilot_lab.playbook(PLAY, extra_vars={"kai_pilot_gpu_fraction": "1.5",
                                                "kai_pilot_workload_namespace": "kai-scheduler"})
    assert proc.returncode != 0, describe(proc)
    out = flat(proc.stdout)
    assert "the workloads must run in their own namespace, never in KAI's. Nothing was changed." in out
    assert not kai_leftovers(pilot_lab)


def test_the_pilot_passes_with_the_gang_rule_and_leaves_nothing(pilot_lab, tmp_path):
    # At -vvv, its log and temp folders in tmp_path: the registry login's password in no form there.
    proc = pilot_lab.playbook(PLAY, "-vvv", env=kept_env(tmp_path))
    out = flat(proc.stdout)
    assert proc.returncode == 0, describe(proc)
    for seen in (
            "1. drivers: 2 GPU node(s), ",
            "2. install: kai-scheduler-v0.0.0-standin v0.0.0-standin from oci://",
            "/kai-scheduler/kai-scheduler/kai-scheduler in namespace kai-scheduler",
            "kai-scheduler-default 1/1",
            "3a. queues: gpu-pilot (leaf, GPU quota 1, limit 2) and gpu-pilot-gang (leaf, no limit) under "
            "gpu-pilot-parent",
            "3b. half-GPU pod gpu-trial/half-gpu (gpu-fraction 0.5, queue gpu-pilot): schedulerName kai-scheduler, "
            "placed on smshare-lab-node-01 by kai-scheduler (\"Successfully assigned pod gpu-trial/half-gpu to node "
            "smshare-lab-node-01 at node-pool default\")",
            "3b. half-GPU pod finished Succeeded; it printed: ",
            "cleanup: removed the release kai-scheduler, namespaces"):
        assert seen in out, (seen, describe(proc))
    # The half-GPU pod's reservation pod may still hold its GPU for a moment (the
    # binder releases it once the pod is gone): 8 or 7 free, the gang of 9 never starts.
    assert re.search(r"4\. gang Job gpu-trial/gang \(queue gpu-pilot-gang, batch-min-member 9 = the pool's 8 GPUs "
                     r"\+ 1, [78] free\): 9 pod\(s\), 0 placed within", out), describe(proc)
    assert re.search(r"the scheduler says: \"Unable to schedule the pod group of Job gang: 9 pods must start "
                     r"together \(kai\.scheduler/batch-min-member\), [78] fit now", out), describe(proc)
    assert "node                     GPUs  model" in proc.stdout
    assert not kai_leftovers(pilot_lab)
    assert "ESTABLISH LOCAL CONNECTION" in proc.stdout and task_ran(proc.stdout, "Log in to the chart's registry")
    forms = secret_forms(pilot_lab.registry.username, pilot_lab.registry.password)
    assert found_in_text(forms, proc.stdout + proc.stderr) == []
    assert (tmp_path / "ansible.log").stat().st_size > 0
    assert found_in_files(forms, [tmp_path]) == []
    # helm keeps a login in its registry config, which only its owner may read
    registry_config = Path(pilot_lab.env.get("HELM_REGISTRY_CONFIG")
                           or Path(pilot_lab.env.get("HOME", str(Path.home()))) / ".config/helm/registry/config.json")
    if registry_config.is_file():
        assert found_in_files(forms, [registry_config.parent], allowed={registry_config: 0o600}) == []


def test_a_scheduler_that_starts_gangs_partially_fails_the_pilot_and_it_still_cleans_up(pilot_lab):
    knob(pilot_lab, "kai-scheduler.gang", "false")
    try:
        proc = pilot_lab.playbook(PLAY)
    finally:
        knob(pilot_lab, "kai-scheduler.gang", None)
    out = flat(proc.stdout)
    assert proc.returncode != 0, describe(proc)
    # any placement is partial: 9 one-GPU pods can never run together on 8 GPUs (placed
    # pods may finish and let the last ones in, so up to 9 can show as placed)
    placed = re.search(r"(\d+) pod\(s\) of the gang were placed \(gang-", out)
    assert placed and 1 <= int(placed.group(1)) <= 9, describe(proc)
    assert "asks for all 9 at once and the pool has only 8 GPUs: they can never run together, so the gang " \
           "started partially. The scheduler does not honour the gang rule." in out
    assert re.search(r"9 pod\(s\), [1-9] placed within \d+s", out), describe(proc)
    assert "cleanup: removed the release kai-scheduler" in out
    assert not kai_leftovers(pilot_lab)


def test_a_second_pilot_is_refused_and_a_killed_ones_leftovers_are_cleaned_up_by_the_next_run(pilot_lab):
    """One pilot at a time: while one runs, a second is refused by its lock, naming it, and
    touches none of its objects. Killed mid-install (no cleanup: its `always` never runs), it
    leaves its namespaces, KAI's CRDs and its lock; the next run takes the lock over (its run
    ended on this machine), cleans up first, then passes and leaves nothing."""
    lab = pilot_lab
    first = lab.start_playbook(PLAY)

    def installing():
        return lab.kubectl("-n", "kai-scheduler", "get", "secret", "-l", "owner=helm", "-o", "name",
                           check=False).stdout.strip() or first.poll() is not None

    try:
        deadline = time.monotonic() + 300
        while not installing():
            assert time.monotonic() < deadline, "the pilot never reached its install"
            time.sleep(0.5)
        assert first.poll() is None, first.communicate()[0][-4000:]
        second = lab.playbook(PLAY)
        out = flat(second.stdout)
        assert second.returncode != 0, describe(second)
        assert re.search(r"holds the lock \(Lease kube-system/smshare-kai-pilot\): \S+@\S+ kai_pilot ", out), \
            describe(second)
        assert "namespace/gpu-trial" in kai_leftovers(lab), "the refused pilot removed the running one's namespace"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.communicate(timeout=60)
    assert kai_leftovers(lab), "the killed pilot left nothing to clean up"
    again = lab.playbook(PLAY)
    out = flat(again.stdout)
    assert again.returncode == 0, describe(again)
    assert "were left by a pilot whose run ended without its cleanup" in out, describe(again)
    assert f"(pid {first.pid} on this machine) has ended" in out, describe(again)
    assert not kai_leftovers(lab)
    assert lab.kubectl("-n", "kube-system", "get", "lease", "smshare-kai-pilot", check=False).returncode != 0
