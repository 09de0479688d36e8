# Apache-2.0
"""rollout_lock: when a Lease may be taken, and its refusal of bad input (the
Lease itself, on a real API server: tests/integration/lab/test_rollout_lock.py)."""
import datetime

import pytest

from ansible_collections.smshare.kai.plugins.modules import rollout_lock

from module_runner import run_module

NOW = datetime.datetime(2026, 12, 4, 18, 0, 0, tzinfo=datetime.timezone.utc)


def spec(holder, renewed_seconds_ago, ttl=60, as_text=False):
    renewed = NOW - datetime.timedelta(seconds=renewed_seconds_ago)
    return {"holderIdentity": holder, "leaseDurationSeconds": ttl, "acquireTime": renewed,
            "renewTime": renewed.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if as_text else renewed}


@pytest.mark.parametrize("lease, action", [
    (None, "create"),
    (spec("me", 5), "renew"),
    (spec("me", 500), "renew"),                 # ours, even expired
    (spec("other", 5), "refuse"),
    (spec("other", 59), "refuse"),
    (spec("other", 60), "take_over"),           # expired at renewTime + leaseDurationSeconds
    (spec("other", 61, as_text=True), "take_over"),
    (spec("", 5), "take_over"),                 # given back without being deleted
    ({"holderIdentity": "other", "renewTime": None, "acquireTime": None, "leaseDurationSeconds": 60}, "take_over"),
])
def test_the_lock_is_taken_only_when_free_ours_or_expired(lease, action):
    assert rollout_lock.decide(lease, "me", NOW)[0] == action


@pytest.mark.parametrize("ended, action, why", [
    (True, "take_over", "its run (pid 41 on this machine) has ended"),
    (False, "refuse", ""),      # still running
    (None, "refuse", ""),       # another machine's run: only its TTL frees it
])
def test_a_lock_whose_run_ended_on_this_machine_is_taken_at_once(ended, action, why):
    lease = dict(spec("other", 5), process="boot=%s pid=41 start=7" % ("0" * 8 + "-0000-0000-0000-" + "0" * 12))
    assert rollout_lock.decide(lease, "me", NOW, ended) == (action, why)


def test_an_expired_lock_says_so_before_its_run_ended():
    assert rollout_lock.decide(spec("other", 61), "me", NOW, True) == ("take_over", "it had expired")


def test_the_refusal_names_the_holder_and_how_to_free_a_dead_one():
    text = rollout_lock._held_message("smshare-driver-upgrade", "kube-system", spec("ops@bastion driver_upgrade", 10))
    assert "another rollout holds the lock (Lease kube-system/smshare-driver-upgrade): ops@bastion driver_upgrade" in text
    assert "expires 2026-12-04T18:00:50" in text and "kubectl -n kube-system delete lease smshare-driver-upgrade" in text


@pytest.mark.parametrize("args, words", [
    ({"holder": " "}, "holder="),
    ({"holder": "x" * 254}, "must be at most 253 characters"),
    ({"holder": "me\nyou"}, "must not contain control characters"),
    ({"holder": "me", "ttl": 0}, "ttl=0"),
    ({"holder": "me", "name": "Smshare_Lock"}, "must be a Kubernetes object name"),
    ({"holder": "me", "namespace": "kube-system\n"}, "namespace="),
    ({"holder": "me", "namespace": "a" * 64}, "must be at most 63 characters"),
], ids=["holder-blank", "holder-too-long", "holder-control", "ttl-zero", "name-rule", "namespace-newline",
        "namespace-too-long"])
def test_bad_input_is_refused_before_the_cluster_is_asked(monkeypatch, args, words):
    done = run_module(monkeypatch, rollout_lock.main, dict(args, kubeconfig="/nonexistent/kubeconfig"))
    assert done.failed and done.result["failure"] == "bad_input" and words in done.result["msg"]


def test_a_kubeconfig_that_cannot_be_read_is_a_cluster_failure(monkeypatch, tmp_path):
    done = run_module(monkeypatch, rollout_lock.main, {"holder": "me", "kubeconfig": str(tmp_path / "none")})
    assert done.failed and done.result["failure"] == "cluster" and "cannot load kubeconfig" in done.result["msg"]
