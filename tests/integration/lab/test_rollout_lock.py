"""smshare.kai.rollout_lock against the lab's real API server: the Lease it
writes, who may take it, and a lock left by a killed run."""
import datetime
import json
import os
import re
from pathlib import Path

import pytest

from lab_helpers import module_on_localhost

pytestmark = [pytest.mark.lab, pytest.mark.second_lab]

NAME = "smshare-test-rollout-lock"
PROCESS = "smshare.kai/holder-process"


def lock(lab, check=False, **args):
    """The module once, on localhost, as a play would run it; its result as a dict."""
    return module_on_localhost(lab, "smshare.kai.rollout_lock",
                               dict({"name": NAME, "namespace": "default", "kubeconfig": str(lab.kubeconfig)}, **args),
                               *(["--check"] if check else []))


def lease(lab):
    found = lab.kubectl("-n", "default", "get", "lease", NAME, "-o", "json", check=False)
    return json.loads(found.stdout)["spec"] if found.returncode == 0 else None


def annotations(lab):
    found = lab.kubectl("-n", "default", "get", "lease", NAME, "-o", "json")
    return json.loads(found.stdout)["metadata"].get("annotations") or {}


@pytest.fixture
def clean(lab):
    lab.kubectl("-n", "default", "delete", "lease", NAME, "--ignore-not-found")
    yield lab
    lab.kubectl("-n", "default", "delete", "lease", NAME, "--ignore-not-found")


def test_one_holder_at_a_time_and_a_dead_ones_lock_is_taken_after_its_ttl(clean):
    """rollout-a as a lock taken by hand (holder_process false): only its TTL frees it."""
    lab = clean
    first = lock(lab, holder="rollout-a", ttl=600, holder_process=False)
    assert first["changed"] and first["outcome"] == "created", first
    assert lease(lab)["holderIdentity"] == "rollout-a" and lease(lab)["leaseDurationSeconds"] == 600
    assert PROCESS not in annotations(lab)
    renewed = lock(lab, holder="rollout-a", ttl=600, holder_process=False)
    assert renewed["outcome"] == "renewed" and lease(lab)["acquireTime"] == lease(lab)["acquireTime"]

    for check in (False, True):   # check mode refuses as a real run would
        refused = lock(lab, check=check, holder="rollout-b")
        assert refused.get("failed") and refused["failure"] == "held", refused
        assert "another rollout holds the lock (Lease default/%s): rollout-a, taken " % NAME in refused["msg"]
    assert lease(lab)["holderIdentity"] == "rollout-a"

    # rollout-a is killed: its lock, last renewed longer ago than its TTL, is taken over.
    past = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(seconds=601)).strftime(
        "%Y-%m-%dT%H:%M:%S.%fZ")
    lab.kubectl("-n", "default", "patch", "lease", NAME, "--type=merge", "-p", json.dumps({"spec": {"renewTime": past}}))
    checked = lock(lab, check=True, holder="rollout-b")
    assert checked["outcome"] == "taken_over" and lease(lab)["holderIdentity"] == "rollout-a", checked
    taken = lock(lab, holder="rollout-b")
    assert taken["outcome"] == "taken_over" and taken["previous_holder"] == "rollout-a", taken
    assert taken["reason"] == "it had expired"
    assert lease(lab)["holderIdentity"] == "rollout-b"


def test_a_lock_whose_run_ended_on_this_machine_is_taken_at_once_and_a_running_ones_is_not(clean):
    """Each `ansible` run here ends with its module: the lock it took records its process,
    gone by the time the next run asks."""
    lab = clean
    assert lock(lab, holder="rollout-a", ttl=600)["outcome"] == "created"
    record = annotations(lab)[PROCESS]
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    found = re.fullmatch(r"boot=(\S+) pid=([0-9]+) start=([0-9]+)", record)
    assert found and found.group(1) == boot, record
    assert not Path("/proc", found.group(2)).exists() or \
        Path("/proc", found.group(2), "stat").read_text().rsplit(")", 1)[1].split()[19] != found.group(3), \
        "the ansible run that took the lock has ended"
    taken = lock(lab, holder="rollout-b", ttl=600)
    assert taken["outcome"] == "taken_over" and taken["previous_holder"] == "rollout-a", taken
    assert taken["reason"] == "its run (pid %s on this machine) has ended" % found.group(2), taken
    assert lease(lab)["holderIdentity"] == "rollout-b" and annotations(lab)[PROCESS] != record

    # A run still going (this test's own process, recorded as the holder's): refused.
    start = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
    for live in ("boot=%s pid=%d start=%s" % (boot, os.getpid(), start),
                 # another machine's run (another boot ID): only its TTL frees it
                 "boot=%s pid=%s start=%s" % ("0" * 8 + boot[8:], found.group(2), found.group(3))):
        lab.kubectl("-n", "default", "annotate", "lease", NAME, "--overwrite", "%s=%s" % (PROCESS, live))
        refused = lock(lab, holder="rollout-c")
        assert refused.get("failed") and refused["failure"] == "held", refused
    assert lease(lab)["holderIdentity"] == "rollout-b"


def test_only_the_holder_gives_the_lock_back(clean):
    lab = clean
    assert lock(lab, holder="rollout-a")["outcome"] == "created"
    other = lock(lab, holder="rollout-b", state="absent")
    assert not other["changed"] and other["previous_holder"] == "rollout-a" and lease(lab) is not None, other
    checked = lock(lab, check=True, holder="rollout-a", state="absent")
    assert checked["changed"] and lease(lab) is not None
    released = lock(lab, holder="rollout-a", state="absent")
    assert released["changed"] and released["outcome"] == "released" and lease(lab) is None, released
    again = lock(lab, holder="rollout-a", state="absent")
    assert not again["changed"] and again["outcome"] == "none"
