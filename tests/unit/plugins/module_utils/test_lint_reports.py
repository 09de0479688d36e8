"""module_utils/lint_reports.py: workload_lint's findings as JUnit XML and SARIF 2.1.0,
from real findings of the rule table (a Pod asking 1.5 of a GPU in a two-document file)."""
import json
from xml.etree import ElementTree

import pytest
import yaml

from ansible_collections.smshare.kai.plugins.module_utils import lint_reports, workload_rules

POD = {"apiVersion": "v1", "kind": "Pod",
       "metadata": {"name": "greedy", "namespace": "gpu-trial", "annotations": {"gpu-fraction": "1.5"}},
       "spec": {"schedulerName": "kai-scheduler", "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                "containers": [{"name": "main", "image": "cuda"}]}}


@pytest.fixture
def linted(tmp_path):
    """(findings as the module returns them, objects checked, the repository root)."""
    (tmp_path / "k8s").mkdir()
    (tmp_path / "k8s" / "pods.yaml").write_text(yaml.safe_dump_all([dict(POD, metadata=dict(
        POD["metadata"], name="fine", annotations={"gpu-fraction": "0.5"})), POD]))
    findings, checked, _files = workload_rules.lint_files([str(tmp_path / "k8s")], yaml.safe_load_all, (yaml.YAMLError,))
    return [f.as_dict() for f in findings], checked, str(tmp_path)


def test_the_findings_this_file_has(linted):
    findings, checked, _root = linted
    assert checked == 2
    assert sorted((f["rule"], f["severity"]) for f in findings) == [
        ("gpu-fraction-range", "error"), ("queue-label-missing", "warning"), ("queue-label-missing", "warning")]


def test_junit_has_a_case_per_rule_and_fails_those_at_or_above_fail_on(linted):
    findings, checked, _root = linted
    suites = ElementTree.fromstring(lint_reports.junit(findings, workload_rules.RULES, checked))
    suite = suites.find("testsuite")
    cases = {c.get("name").split(":")[0]: c for c in suite.findall("testcase")}
    assert sorted(cases) == sorted(workload_rules.RULES) and suite.get("tests") == str(len(workload_rules.RULES))
    assert suite.get("failures") == suites.get("failures") == "1"
    failure = cases["gpu-fraction-range"].find("failure")
    assert failure.get("type") == "error" and failure.get("message") == "1 finding"
    assert "Pod gpu-trial/greedy" in failure.text and "k8s/pods.yaml#2" in failure.text
    # A warning under fail_on=error is reported, not failed.
    assert cases["queue-label-missing"].find("failure") is None
    assert cases["queue-label-missing"].find("system-out").text.count("WARNING: ") == 2
    assert {p.get("name"): p.get("value") for p in suite.find("properties")} == {"objects_checked": "2",
                                                                                 "fail_on": "error"}


@pytest.mark.parametrize("fail_on, failing", [("warning", {"gpu-fraction-range", "queue-label-missing"}),
                                              ("never", set())])
def test_junit_follows_fail_on(linted, fail_on, failing):
    findings, checked, _root = linted
    suite = ElementTree.fromstring(lint_reports.junit(findings, workload_rules.RULES, checked, fail_on)).find("testsuite")
    assert {c.get("name").split(":")[0] for c in suite.findall("testcase") if c.find("failure") is not None} == failing


def test_a_clean_run_is_every_rule_passed():
    suite = ElementTree.fromstring(lint_reports.junit([], workload_rules.RULES, 3)).find("testsuite")
    assert suite.get("failures") == "0" and all(c.find("failure") is None for c in suite.findall("testcase"))


def test_sarif_names_the_rules_and_points_each_result_at_its_file_and_object(linted):
    findings, _checked, root = linted
    log = json.loads(json.dumps(lint_reports.sarif(findings, workload_rules.RULES, root)))   # plain JSON
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run, = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(workload_rules.RULES)
    assert run["originalUriBaseIds"] == {"SRCROOT": {"uri": "file://%s/" % root}}
    error, = [r for r in run["results"] if r["level"] == "error"]
    assert rules[error["ruleIndex"]]["id"] == error["ruleId"] == "gpu-fraction-range"
    assert error["locations"][0]["physicalLocation"]["artifactLocation"] == {"uri": "k8s/pods.yaml",
                                                                             "uriBaseId": "SRCROOT"}
    assert error["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == \
        "Pod gpu-trial/greedy: metadata.annotations[gpu-fraction]"
    assert error["properties"] == {"document": 2}
    assert error["message"]["text"] == [f for f in findings if f["severity"] == "error"][0]["message"]


def test_sarif_outside_the_base_and_without_a_file(linted):
    findings, _checked, root = linted
    outside = lint_reports.sarif(findings, workload_rules.RULES, root + "/elsewhere")["runs"][0]["results"][0]
    assert outside["locations"][0]["physicalLocation"]["artifactLocation"]["uri"].startswith("file://" + root)
    live = [dict(findings[0], source="cluster")]
    result = lint_reports.sarif(live, workload_rules.RULES)["runs"][0]["results"][0]
    assert "physicalLocation" not in result["locations"][0]
    assert result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"].startswith("cluster: Pod gpu-trial/")


def test_sarif_uris_are_encoded_and_a_hash_in_a_file_name_stays(linted):
    findings, _checked, root = linted
    odd = dict(findings[0], source=root + "/k8s/team a#1.yaml#3")
    result = lint_reports.sarif([odd], workload_rules.RULES, root)["runs"][0]["results"][0]
    assert result["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == "k8s/team%20a%231.yaml"
    assert result["properties"] == {"document": 3}
    spaced = lint_reports.sarif([odd], workload_rules.RULES, root + "/my repo")["runs"][0]
    assert spaced["originalUriBaseIds"]["SRCROOT"]["uri"] == "file://%s/my%%20repo/" % root
    # A finding about a whole file (it could not be parsed) names no object.
    whole = dict(findings[0], source=root + "/k8s/bad.yaml", object="", field="")
    location = lint_reports.sarif([whole], workload_rules.RULES, root)["runs"][0]["results"][0]["locations"][0]
    assert "logicalLocations" not in location and location["physicalLocation"]["artifactLocation"]["uri"] == \
        "k8s/bad.yaml"
