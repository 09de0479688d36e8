# -*- coding: utf-8 -*-
# Apache-2.0
"""workload_lint's findings as the reports CI systems read: JUnit XML (test
tabs of Jenkins, GitLab, Azure) and SARIF 2.1.0 (GitHub code scanning and
other SARIF viewers). Pure functions of the findings (Finding.as_dict rows).

JUnit: one test case per rule of the table, so a clean run shows what was
checked; a rule's findings that fail the run (at or above fail_on) are one
<failure> each in its case's text, the others are the case's system-out.
SARIF: one result per finding, its rule from the table; a finding read from a
file points at the file (the #N of a multi-document file is the result's
document property: the linter reads objects, not lines)."""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import os
from xml.etree import ElementTree

try:
    from urllib.parse import quote
except ImportError:  # pragma: no cover - Python 2
    from urllib import quote

TOOL = "smshare.kai.workload_lint"
INFO_URI = "https://example.invalid/smshare/kai/blob/main/README.md"   # galaxy.yml's documentation
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SRCROOT = "SRCROOT"


def _fails(severity, fail_on):
    return fail_on == "warning" or (fail_on == "error" and severity == "error")


def junit(findings, rules, checked, fail_on="error", name=TOOL):
    """The JUnit XML document (a str). rules: {rule: (severity, what it checks)}."""
    by_rule = {}
    for finding in findings:
        by_rule.setdefault(finding["rule"], []).append(finding)
    failing = [f for f in findings if _fails(f["severity"], fail_on)]
    suites = ElementTree.Element("testsuites", name=name, tests=str(len(rules)),
                                 failures=str(len(set(f["rule"] for f in failing))), errors="0")
    suite = ElementTree.SubElement(suites, "testsuite", name=name, tests=str(len(rules)),
                                   failures=suites.get("failures"), errors="0", skipped="0")
    props = ElementTree.SubElement(suite, "properties")
    ElementTree.SubElement(props, "property", name="objects_checked", value=str(checked))
    ElementTree.SubElement(props, "property", name="fail_on", value=fail_on)
    for rule in sorted(rules):
        severity, what = rules[rule]
        case = ElementTree.SubElement(suite, "testcase", classname=name, name="%s: %s" % (rule, what))
        mine = by_rule.get(rule, [])
        failed = [f for f in mine if _fails(f["severity"], fail_on)]
        if failed:
            failure = ElementTree.SubElement(case, "failure", type=failed[0]["severity"],
                                             message="%d finding%s" % (len(failed), "" if len(failed) == 1 else "s"))
            failure.text = "\n".join(f["text"] for f in failed)
        others = [f for f in mine if f not in failed]
        if others:
            ElementTree.SubElement(case, "system-out").text = "\n".join(f["text"] for f in others)
    return ElementTree.tostring(suites, encoding="unicode")


def _file_uri(path):
    """file:// URI of an absolute path, percent-encoded."""
    return "file://" + quote(path.replace(os.sep, "/"))


def _location(finding, base_dir):
    """(the result's location, the document number of a multi-document file or None)."""
    source = finding.get("source") or ""
    path, document = source, None
    head, sep, tail = source.rpartition("#")
    if sep and tail.isdigit():   # workload_rules writes FILE#N for the Nth document; a '#' in a name stays
        path, document = head, int(tail)
    name = ": ".join(p for p in (finding.get("object"), finding.get("field")) if p)
    location = {}
    if path and os.path.isabs(path):
        base = base_dir.rstrip(os.sep) if base_dir else None
        if base and path.startswith(base + os.sep):
            artifact = {"uri": quote(os.path.relpath(path, base).replace(os.sep, "/")), "uriBaseId": SRCROOT}
        else:
            artifact = {"uri": _file_uri(path)}
        location["physicalLocation"] = {"artifactLocation": artifact}
    elif path:
        name = "%s: %s" % (path, name) if name else path   # cluster, objects[N]: no file to point at
    if name:
        location["logicalLocations"] = [{"fullyQualifiedName": name, "kind": "object"}]
    return location, document


def sarif(findings, rules, base_dir=None):
    """The SARIF 2.1.0 log (a dict). base_dir: paths under it are written relative to
    it (uriBaseId SRCROOT), as code-scanning services expect."""
    ids = sorted(rules)
    results = []
    for finding in findings:
        location, document = _location(finding, base_dir)
        result = {"ruleId": finding["rule"], "level": "error" if finding["severity"] == "error" else "warning",
                  "message": {"text": finding["message"]}, "locations": [location]}
        if finding["rule"] in rules:
            result["ruleIndex"] = ids.index(finding["rule"])
        if document is not None:
            result["properties"] = {"document": document}
        results.append(result)
    run = {"tool": {"driver": {"name": TOOL, "informationUri": INFO_URI, "rules": [
        {"id": rule, "shortDescription": {"text": rules[rule][1]},
         "defaultConfiguration": {"level": "error" if rules[rule][0] == "error" else "warning"}} for rule in ids]}},
        "results": results}
    if base_dir:
        run["originalUriBaseIds"] = {SRCROOT: {"uri": _file_uri(base_dir.rstrip(os.sep) + os.sep)}}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}
