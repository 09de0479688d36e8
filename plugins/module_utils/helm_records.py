# -*- coding: utf-8 -*-
# Apache-2.0
"""Helm's own record of a release, read as Kubernetes Secrets: what a killed run leaves.

helm writes each revision of a release as a Secret `sh.helm.release.v1.<name>.v<N>`
labelled owner=helm, name=<name>, status=<status>, version=<N>. An install,
upgrade or rollback first writes its revision as pending-install, pending-upgrade
or pending-rollback and marks it deployed or failed when it ends; a helm that is
killed in between (a play interrupted, the controller lost) leaves it pending,
and every later `helm upgrade --install` of that release then fails with
"another operation (install/upgrade/rollback) is in progress" (helm/helm#4558).
A pending revision older than helm's timeout for this role's runs cannot belong
to a helm still running one of them: it is stale, and removing its record lets
the next upgrade go on from the revision before it (or install afresh, for a
first install), reconciling whatever the killed run had applied.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import calendar
import re
import time

PENDING = ("pending-install", "pending-upgrade", "pending-rollback")
RECORD_NAME = re.compile(r"\Ash\.helm\.release\.v1\.(?P<release>.+)\.v(?P<revision>[1-9][0-9]*)\Z")


def _epoch(timestamp):
    """RFC 3339 UTC as the API server writes it (2026-12-06T11:40:00Z) -> seconds, or None."""
    try:
        return calendar.timegm(time.strptime(str(timestamp), "%Y-%m-%dT%H:%M:%SZ"))
    except (TypeError, ValueError):
        return None


def pending(secrets, release, now, timeout):
    """The pending revisions of `release` among helm's record Secrets.

    secrets: Secret objects (k8s_info's resources); now: seconds since the
    epoch; timeout: seconds a helm of this role may run. Returns
    {"stale": [...], "running": [...]}, each row {"secret", "revision",
    "status", "since", "age"}, oldest revision first. A pending record whose
    age cannot be read counts as running (never removed on a guess).
    """
    stale, running = [], []
    for secret in secrets or []:
        if not isinstance(secret, dict):
            continue
        metadata = secret.get("metadata") or {}
        labels = metadata.get("labels") or {}
        match = RECORD_NAME.match(str(metadata.get("name", "")))
        if not match or match.group("release") != release or labels.get("owner") != "helm":
            continue
        status = labels.get("status")
        if status not in PENDING:
            continue
        created = _epoch(metadata.get("creationTimestamp"))
        age = None if created is None else max(0, int(now - created))
        row = {"secret": metadata["name"], "revision": int(match.group("revision")), "status": status,
               "since": metadata.get("creationTimestamp"), "age": age}
        (stale if age is not None and age > timeout else running).append(row)
    return {"stale": sorted(stale, key=lambda r: r["revision"]),
            "running": sorted(running, key=lambda r: r["revision"])}
