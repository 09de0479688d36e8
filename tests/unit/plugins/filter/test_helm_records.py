# Apache-2.0
"""helm_pending_records: which of helm's records a killed run left pending, by table."""
import calendar
import time

import pytest
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter.helm_records import helm_pending_records

NOW = calendar.timegm(time.strptime("2026-12-06T12:00:00Z", "%Y-%m-%dT%H:%M:%SZ"))


def record(revision, status, created="2026-12-06T11:00:00Z", release="kai-scheduler", owner="helm", name=None):
    return {"apiVersion": "v1", "kind": "Secret", "type": "helm.sh/release.v1",
            "metadata": {"name": name or "sh.helm.release.v1.%s.v%d" % (release, revision),
                         "creationTimestamp": created,
                         "labels": {"owner": owner, "name": release, "status": status, "version": str(revision)}}}


def rows(result, key):
    return [(r["revision"], r["status"], r["age"]) for r in result[key]]


@pytest.mark.parametrize("secrets, stale, running", [
    pytest.param([record(3, "deployed"), record(2, "superseded")], [], [], id="nothing-pending"),
    pytest.param([record(3, "deployed"), record(4, "pending-upgrade")], [(4, "pending-upgrade", 3600)], [],
                 id="killed-upgrade-an-hour-ago"),
    pytest.param([record(1, "pending-install", "2026-12-06T11:59:00Z")], [], [(1, "pending-install", 60)],
                 id="install-a-minute-ago-may-be-running"),
    pytest.param([record(1, "pending-install", "2026-12-06T11:49:00Z")], [(1, "pending-install", 660)], [],
                 id="first-install-killed"),
    pytest.param([record(5, "pending-rollback", "2026-12-06T11:49:59Z")], [(5, "pending-rollback", 601)], [],
                 id="just-past-the-timeout"),
    pytest.param([record(5, "pending-upgrade", "2026-12-06T11:50:00Z")], [], [(5, "pending-upgrade", 600)],
                 id="at-the-timeout-still-running"),
    pytest.param([record(5, "pending-upgrade", "yesterday")], [], [(5, "pending-upgrade", None)],
                 id="unreadable-age-never-removed-on-a-guess"),
    pytest.param([record(5, "pending-upgrade", "2026-12-06T12:05:00Z")], [], [(5, "pending-upgrade", 0)],
                 id="clock-skew-counts-as-new"),
    pytest.param([record(9, "pending-upgrade"), record(7, "pending-upgrade")],
                 [(7, "pending-upgrade", 3600), (9, "pending-upgrade", 3600)], [], id="oldest-first"),
    pytest.param([record(4, "pending-upgrade", release="kai-scheduler-other"),
                  record(4, "pending-upgrade", owner="someone"),
                  record(4, "pending-upgrade", name="sh.helm.release.v1.kai-scheduler.v04"),
                  record(4, "pending-upgrade", name="kai-scheduler-config"), "not a dict"],
                 [], [], id="not-this-releases-helm-records"),
    pytest.param([record(4, "uninstalling"), record(3, "failed")], [], [], id="not-pending"),
])
def test_pending_records(secrets, stale, running):
    result = helm_pending_records(secrets, "kai-scheduler", 600, now=NOW)
    assert rows(result, "stale") == stale
    assert rows(result, "running") == running


def test_a_row_names_the_secret_to_remove_and_when_it_was_left():
    result = helm_pending_records([record(4, "pending-upgrade")], "kai-scheduler", 600, now=NOW)
    assert result["stale"] == [{"secret": "sh.helm.release.v1.kai-scheduler.v4", "revision": 4,
                                "status": "pending-upgrade", "since": "2026-12-06T11:00:00Z", "age": 3600}]


def test_a_release_name_with_dots_is_matched_whole():
    secrets = [record(2, "pending-upgrade", release="kai.scheduler"), record(2, "pending-upgrade", release="kai")]
    assert [r["secret"] for r in helm_pending_records(secrets, "kai", 600, now=NOW)["stale"]] == \
        ["sh.helm.release.v1.kai.v2"]


@pytest.mark.parametrize("secrets, timeout, words", [
    pytest.param({"resources": []}, 600, "as a list", id="not-a-list"),
    pytest.param([], "ten minutes", "is not a number", id="timeout-text"),
    pytest.param([], 0, "must be above 0", id="timeout-zero"),
    pytest.param([], float("nan"), "must be above 0", id="timeout-nan"),
])
def test_bad_input_is_named(secrets, timeout, words):
    with pytest.raises(AnsibleFilterError, match=words):
        helm_pending_records(secrets, "kai-scheduler", timeout, now=NOW)
