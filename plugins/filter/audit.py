# -*- coding: utf-8 -*-
# Apache-2.0
"""Drift findings for playbooks/audit.yml (documentation: audit_*.yml beside this file).

Every filter returns findings of one shape, so one report (and later its
Prometheus textfile and HTML exports) reads them all:
  {area, host, object, field, wanted, found, detail}
area: driver | release | image | queue. wanted/found are plain values
(strings, numbers, lists); "(absent)" names something that is not there.
Pure functions of what the roles' read tasks returned: unit-tested alone.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import json

from ansible.errors import AnsibleFilterError

ABSENT = "(absent)"
AREAS = ("driver", "release", "image", "queue")
FIELDS = ("area", "host", "object", "field", "wanted", "found", "detail")


def finding(area, host, obj, field, wanted, found, detail=""):
    if area not in AREAS:
        raise AnsibleFilterError("audit: unknown area %r (one of %s)" % (area, ", ".join(AREAS)))
    return {"area": area, "host": str(host or ""), "object": str(obj), "field": str(field),
            "wanted": _plain(wanted), "found": _plain(found), "detail": str(detail or "")}


def _plain(value):
    """Ansible's lazy containers and tagged values -> plain JSON values."""
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bool) or value is None or isinstance(value, (int, float)):
        return value
    return str(value)


def _upstream(debian_version):
    """615.71.09-1 -> 615.71.09 (an epoch 1:615... too)."""
    if not debian_version:
        return None
    version = str(debian_version).split(":", 1)[-1]
    return version.rsplit("-", 1)[0] if "-" in version else version


def _leaves(values, prefix=""):
    """{dotted path: value} of nested dicts; lists and scalars are leaves; an empty dict is a leaf."""
    out = {}
    if isinstance(values, dict) and values:
        for key, value in values.items():
            path = "%s.%s" % (prefix, key) if prefix else str(key)
            out.update(_leaves(value, path))
    elif prefix:
        out[prefix] = values
    return out


# ---------------------------------------------------------------- driver
def audit_driver(info, host, branch, version=None, pin_package=None, fabricmanager="auto"):
    """Findings for one GPU node from smshare.kai.nvidia_driver_info (gather: packages, driver,
    nvswitches, services) against the nvidia_driver role's pins.

    branch: the pinned branch. version: the pinned upstream version (None: whatever is
    installed, which the loaded driver and Fabric Manager must then match).
    pin_package: nvidia-driver-pinning-<branch>. fabricmanager: auto | always | never.
    """
    if not isinstance(info, dict):
        raise AnsibleFilterError("audit_driver: expects nvidia_driver_info's result (a dict)")
    branch = str(branch)
    pin_package = pin_package or "nvidia-driver-pinning-%s" % branch
    installed = info.get("installed") or {}
    driver = info.get("driver") or {}
    out = []

    def add(obj, field, wanted, found, detail=""):
        out.append(finding("driver", host, obj, field, wanted, found, detail))

    # The pinning package: ours installed, no other branch's beside it.
    if pin_package not in installed:
        add(pin_package, "installed", "installed", ABSENT,
            "without the pinning package apt may move the node to another branch")
    for name in sorted(installed):
        if name.startswith("nvidia-driver-pinning-") and name != pin_package:
            add(name, "installed", ABSENT, installed[name],
                "another branch's pinning package defeats %s" % pin_package)

    # The installed driver package.
    installed_driver = _upstream(installed.get("nvidia-driver-open"))
    if installed_driver is None:
        add("nvidia-driver-open", "version", version or "%s.x" % branch, ABSENT)
    else:
        if installed_driver.split(".")[0] != branch:
            add("nvidia-driver-open", "branch", branch, installed_driver.split(".")[0])
        if version and installed_driver != str(version):
            add("nvidia-driver-open", "version", str(version), installed_driver)
    want = str(version) if version else installed_driver

    # The loaded driver.
    state = driver.get("state")
    if state != "ok":
        modules = (driver.get("kernel_module_version") or "none", driver.get("library_version") or "none")
        add("loaded driver", "state", "ok", state or ABSENT, "loaded module %s, library %s" % modules)
    else:
        loaded = str(driver.get("version") or "")
        if str(driver.get("branch")) != branch:
            add("loaded driver", "branch", branch, driver.get("branch"))
        if want and loaded != want:
            add("loaded driver", "version", want, loaded,
                "the node runs another driver than the one installed: reboot it (drained)"
                if installed_driver and loaded != installed_driver else "")

    # Fabric Manager: wanted where NVSwitches are (auto) or always.
    switches = info.get("nvswitch_count") or 0
    wanted_fm = fabricmanager == "always" or (fabricmanager == "auto" and switches > 0)
    fm = _upstream(installed.get("nvidia-fabricmanager"))
    if wanted_fm:
        if fm is None:
            add("nvidia-fabricmanager", "version", want or ABSENT, ABSENT,
                "%d NVSwitches need Fabric Manager at the driver's version" % switches)
        elif want and fm != want:
            add("nvidia-fabricmanager", "version", want, fm, "Fabric Manager must equal the driver's version")
        unit = (info.get("services") or {}).get("nvidia-fabricmanager") or {}
        if fm is not None and unit and unit.get("active") != "active":
            add("nvidia-fabricmanager.service", "active", "active", unit.get("active") or ABSENT)
    elif fabricmanager == "never" and fm is not None:
        add("nvidia-fabricmanager", "installed", ABSENT, fm)
    return out


# ---------------------------------------------------------------- helm releases
def audit_values(found, wanted, release, host="", status=None):
    """Chart values that differ between a release's user-supplied values (helm get values)
    and the ones the role would apply. Each differing leaf is one finding; a value the
    release has but the role would not set is found with wanted (absent).

    status: helm_info's status dict (None or without values: the release is not installed).
    """
    if status is not None and not (status or {}).get("status"):
        return [finding("release", host, release, "status", "deployed", ABSENT,
                        "the release is not installed: run its play")]
    out = []
    if status and status.get("status") != "deployed":
        out.append(finding("release", host, release, "status", "deployed", status.get("status"),
                           status.get("description") or ""))
    have = _leaves(found or {})
    want = _leaves(wanted or {})
    for path in sorted(set(have) | set(want)):
        w = want.get(path, ABSENT)
        h = have.get(path, ABSENT)
        if _same(w, h):
            continue
        out.append(finding("release", host, release, "values." + path, w, h))
    return out


def _same(a, b):
    if isinstance(a, (dict, list)) or isinstance(b, (dict, list)):
        return json.dumps(_plain(a), sort_keys=True) == json.dumps(_plain(b), sort_keys=True)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return a == b


# ---------------------------------------------------------------- images
def audit_images(rows, namespace, host="", base="", tag=""):
    """Findings from smshare.kai.pod_images rows (one per container): each row that is not
    ok. A digest that differs is field digest (wanted: the manifest's digest); anything
    else (a foreign image, an unlisted service, no registry digest) is field image."""
    out = []
    for row in rows or []:
        if row.get("ok"):
            continue
        obj = "%s/%s/%s" % (namespace, row.get("pod"), row.get("container"))
        if row.get("expected_digest") and row.get("digest") and row.get("digest") != row.get("expected_digest") \
                and "pushed again" in (row.get("problem") or ""):
            out.append(finding("image", host, obj, "digest", row["expected_digest"], row["digest"],
                               row.get("problem")))
        else:
            wanted = "%s/%s:%s" % (base.rstrip("/"), row.get("service") or "<service>", tag) if base else ""
            out.append(finding("image", host, obj, "image", wanted, row.get("image") or ABSENT,
                               row.get("problem")))
    return out


# ---------------------------------------------------------------- queues
MANAGED_BY = ("app.kubernetes.io/managed-by", "smshare.kai")


def audit_queues(plan, live, host="", api_found=True):
    """Queue findings: the queue_plan's objects (what the inventory wants) against the
    cluster's Queue objects. A wanted queue that is missing, each spec field that
    differs (fields only the cluster sets, such as defaults, are not drift), a queue
    this collection manages that the inventory no longer lists, and the plan's errors.
    A cluster that does not serve the Queue API is one finding."""
    if not api_found:
        return [finding("queue", host, "scheduling.run.ai/v2 Queue", "(api)", "served", ABSENT,
                        "install KAI Scheduler (its chart brings the CRD)")]
    if not isinstance(plan, dict):
        raise AnsibleFilterError("audit_queues: expects the result of smshare.kai.queue_plan")
    by_name = dict(((q.get("metadata") or {}).get("name"), q) for q in live or [])
    out = []
    wanted_names = set()
    for obj in plan.get("objects") or []:
        name = obj["metadata"]["name"]
        wanted_names.add(name)
        have = by_name.get(name)
        if have is None:
            out.append(finding("queue", host, name, "(queue)", "present", ABSENT))
            continue
        have_spec = _leaves(have.get("spec") or {})
        for path, value in sorted(_leaves(obj.get("spec") or {}).items()):
            found = have_spec.get(path, ABSENT)
            if not _same(value, found):
                out.append(finding("queue", host, name, "spec." + path, value, found))
    for name, have in sorted(by_name.items()):
        labels = (have.get("metadata") or {}).get("labels") or {}
        if name not in wanted_names and labels.get(MANAGED_BY[0]) == MANAGED_BY[1]:
            out.append(finding("queue", host, name, "(queue)", ABSENT, "present",
                               "managed by smshare.kai but no longer in the inventory (prune it with smshare_queues_prune)"))
    for error in plan.get("errors") or []:
        out.append(finding("queue", host, "(tree)", "check", "no problem", str(error)))
    return out


# ---------------------------------------------------------------- report
def _cell(value):
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def audit_lines(findings):
    """One line per finding: 'area host object field: wanted W, found F (detail)'."""
    lines = []
    for f in findings or []:
        line = "%s %s%s %s: wanted %s, found %s" % (
            f["area"], (f["host"] + " ") if f.get("host") else "", f["object"], f["field"],
            _cell(f["wanted"]), _cell(f["found"]))
        if f.get("detail"):
            line += " (%s)" % f["detail"]
        lines.append(line)
    return lines


def audit_report(findings, checked=None, generated=None):
    """The report document: {version, generated, drift, counts (per area), checked, findings}."""
    findings = [_plain(f) for f in findings or []]
    for f in findings:
        missing = [k for k in FIELDS if k not in f]
        if missing:
            raise AnsibleFilterError("audit_report: a finding lacks %s: %r" % (", ".join(missing), f))
    findings.sort(key=lambda f: (AREAS.index(f["area"]), f["host"], f["object"], f["field"]))
    counts = dict((area, len([f for f in findings if f["area"] == area])) for area in AREAS)
    return {"version": 1, "generated": str(generated or ""), "drift": bool(findings), "counts": counts,
            "checked": _plain(checked or {}), "findings": findings}


def _md(value):
    return _cell(value).replace("|", "\\|").replace("\n", " ")


def audit_markdown(report):
    """The report as Markdown: a summary line, then one table per area that has findings."""
    lines = ["# smshare.kai drift audit", ""]
    if report.get("generated"):
        lines += ["Generated %s." % report["generated"], ""]
    checked = report.get("checked") or {}
    if checked:
        parts = ["%s: %s" % (k, ", ".join(map(str, v)) if isinstance(v, list) else v) for k, v in sorted(checked.items())]
        lines += ["Checked: " + "; ".join(parts), ""]
    if not report.get("drift"):
        lines.append("No drift: every node, release, image and queue matches the inventory.")
        return "\n".join(lines) + "\n"
    lines.append("**Drift**: " + ", ".join("%d %s" % (n, area) for area, n in report["counts"].items() if n))
    for area in AREAS:
        rows = [f for f in report["findings"] if f["area"] == area]
        if not rows:
            continue
        lines += ["", "## %s" % area, "", "| host | object | field | wanted | found | detail |",
                  "| --- | --- | --- | --- | --- | --- |"]
        for f in rows:
            lines.append("| %s |" % " | ".join(_md(f[k]) for k in ("host", "object", "field", "wanted", "found", "detail")))
    return "\n".join(lines) + "\n"


UNREAD = "the host failed or was unreachable: see its errors above"


def audit_collect(hostvars, node_hosts, cluster_hosts, node_key, cluster_keys):
    """Every host's findings, in host order, and a finding for each audit a host did not leave
    (it failed or was unreachable): node_key on the GPU nodes whose driver is host-installed,
    each of cluster_keys on the cluster hosts. hostvars: Ansible's, or any {host: {var: value}}."""
    for name, value in (("node_hosts", node_hosts), ("cluster_hosts", cluster_hosts), ("cluster_keys", cluster_keys)):
        if not isinstance(value, list):
            raise AnsibleFilterError("audit_collect: %s must be a list, got %s" % (name, type(value).__name__))

    def read(host, key):
        found = hostvars[host]
        return found[key] if key in found else None

    unread = []
    for host in node_hosts:
        methods = hostvars[host]
        method = methods["smshare_driver_method"] if "smshare_driver_method" in methods else "host"
        if method == "host" and read(host, node_key) is None:
            unread.append(finding("driver", host, host, "(audit)", "read", "not read", UNREAD))
    for host in cluster_hosts:
        for key in cluster_keys:
            if read(host, key) is None:
                unread.append(finding("queue" if key.startswith("queues") else "release", host,
                                      key.replace("_audit_findings", ""), "(audit)", "read", "not read", UNREAD))
    findings, seen = [], set()
    for host in list(node_hosts) + list(cluster_hosts):
        if host in seen:
            continue
        seen.add(host)
        for key in [node_key] + list(cluster_keys):
            findings.extend(read(host, key) or [])
    return findings + unread


class FilterModule(object):
    def filters(self):
        return {"audit_driver": audit_driver, "audit_values": audit_values, "audit_images": audit_images,
                "audit_queues": audit_queues, "audit_lines": audit_lines, "audit_report": audit_report,
                "audit_markdown": audit_markdown, "audit_collect": audit_collect}
