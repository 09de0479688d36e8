# Apache-2.0
"""The admission policy generated from workload_rules, without an API server: every CEL
expression of the generated objects compiled and evaluated with cel-expr-python (Google's
CEL runtime, with cel-go's extended strings library that Kubernetes enables) against the
linter's case table, case by case the same verdict; the objects checked against the API's
published schema (fixtures/admission_policy). What admission does around the expressions is
modelled here as the API documents it: matchConditions first (all true, or the policy does
not judge the object), then the variables in order (each sees the earlier ones), then the
validations, each false one a failure of its rule."""
import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest
# the CEL runtime (requirements/python.txt): a missing one fails the tests, it never skips them
from cel_expr_python import cel
from cel_expr_python.ext import ext_strings

from ansible_collections.smshare.kai.plugins.module_utils import admission_policy as ap
from ansible_collections.smshare.kai.plugins.module_utils import workload_rules as wr

from workload_case_table import CASES

REPO = Path(__file__).resolve().parents[4]
FIXTURES = Path(__file__).parent / "fixtures" / "admission_policy"
SELECTOR = {"matchLabels": {"smshare.kai/workload-rules": "enforced"}}
CREATE = {"operation": "CREATE"}


class Policy:
    """One generated ValidatingAdmissionPolicy, compiled: its validations' rules from the generator."""

    def __init__(self, env, obj, severity):
        spec = obj["spec"]
        self.name = obj["metadata"]["name"]
        self.severity = severity
        self.conditions = [env.compile(c["expression"]) for c in spec["matchConditions"]]
        self.variables = [(v["name"], env.compile(v["expression"])) for v in spec["variables"]]
        self.checks = [env.compile(v["expression"]) for v in spec["validations"]]
        checks, self.rules = ap.validations(severity)
        assert [v["message"] for v in spec["validations"]] == [c["message"] for c in checks]

    @staticmethod
    def _value(program, data, what):
        value = program.eval(data=data)
        if value.type() == cel.Type.ERROR:
            raise AssertionError("%s: evaluation error %s" % (what, value.value()))
        return value.plain_value()

    def judge(self, obj, request=None, old=None):
        """None when the policy does not judge the object, else {(rule, severity)} it breaks."""
        data = {"object": obj, "oldObject": old, "request": request or CREATE}
        for index, program in enumerate(self.conditions):
            matched = self._value(program, data, "matchConditions[%d]" % index)
            assert isinstance(matched, bool)
            if not matched:
                return None
        variables = {}
        for name, program in self.variables:
            variables[name] = self._value(program, dict(data, variables=variables), "variables." + name)
        data["variables"] = variables
        broken = set()
        for index, program in enumerate(self.checks):
            passed = self._value(program, data, "%s validations[%d] (%s)" % (self.name, index, self.rules[index]))
            assert isinstance(passed, bool), (self.rules[index], passed)
            if not passed:
                broken.add((self.rules[index], self.severity))
        return broken


@pytest.fixture(scope="module")
def env():
    names = ("object", "oldObject", "request", "variables")
    return cel.NewEnv(variables=dict((n, cel.Type.DYN) for n in names), extensions=[ext_strings.ExtStrings()])


@pytest.fixture(scope="module")
def generated():
    return ap.objects(namespace_selector=SELECTOR)


@pytest.fixture(scope="module")
def policies(env, generated):
    found = [o for o in generated if o["kind"] == ap.POLICY_KIND]
    return [Policy(env, found[0], wr.ERROR), Policy(env, found[1], wr.WARNING)]


def judge(policies, obj, request=None, old=None):
    results = [p.judge(obj, request, old) for p in policies]
    assert (results[0] is None) == (results[1] is None)
    return None if results[0] is None else frozenset(results[0] | results[1])


# ---------------------------------------------------------------- one rule table
def test_every_rule_is_in_cel_or_named_as_needing_more_than_one_object():
    assert set(ap.cel_rules()) | set(wr.NEEDS) == set(wr.RULES)
    assert not set(ap.cel_rules()) & set(wr.NEEDS)


def test_each_validation_reports_its_rules_severity_and_message():
    for rule, severity, _cel in ap.VIOLATIONS:
        assert severity in wr.severities(rule), rule
        text = ap.message(rule, severity)
        assert text.startswith(wr.RULES[rule][1]) and "[%s]" % rule in text and severity in text
        assert "\n" not in text


def test_every_severity_the_linter_reports_has_a_validation():
    pairs = set((rule, severity) for rule, severity, _cel in ap.VIOLATIONS)
    assert pairs == set((rule, s) for rule in ap.cel_rules() for s in wr.severities(rule))


# ---------------------------------------------------------------- the case table
@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_policy_gives_the_linters_verdict(policies, case):
    verdict = judge(policies, case.obj)
    if case.controlled:
        assert verdict is None    # a controller's object: judged through its owner's template
    else:
        assert verdict == case.expected


def test_agreement_figures(policies):
    judged = [c for c in CASES if not c.controlled]
    agree = [c for c in judged if judge(policies, c.obj) == c.expected]
    assert len(agree) == len(judged) and len(judged) + len([c for c in CASES if c.controlled]) == len(CASES)
    assert len(CASES) >= 150


def test_every_case_is_of_a_kind_the_policy_matches():
    assert set(c.obj["kind"] for c in CASES) <= set(ap.KIND_RESOURCES)


def test_the_policy_matches_every_kind_the_linter_checks():
    kinds = {"Pod", "JobSet", "LeaderWorkerSet", "PodGroup"} | set(wr.TEMPLATES) | set(wr.KUBEFLOW) | set(wr.RAY)
    assert set(ap.KIND_RESOURCES) == kinds


# ---------------------------------------------------------------- what admission judges
def test_an_update_is_judged_when_it_changes_the_spec(policies):
    bad = copy.deepcopy(next(c.obj for c in CASES if c.id == "a Deployment's template as root"))
    assert judge(policies, bad, {"operation": "UPDATE"}, bad) is None
    changed = copy.deepcopy(bad)
    changed["spec"]["replicas"] = 3
    assert judge(policies, changed, {"operation": "UPDATE"}, bad) == {("fraction-runs-as-root", "error")}
    relabelled = copy.deepcopy(bad)
    relabelled["metadata"]["annotations"] = {"deployment.kubernetes.io/revision": "2"}
    assert judge(policies, relabelled, {"operation": "UPDATE"}, bad) is None


def test_pods_are_judged_when_created_only(generated):
    rules = generated[0]["spec"]["matchConstraints"]["resourceRules"]
    pods = [r for r in rules if "pods" in r["resources"]]
    assert pods == [{"apiGroups": [""], "apiVersions": ["*"], "operations": ["CREATE"], "resources": ["pods"],
                     "scope": "Namespaced"}]
    others = [r for r in rules if "pods" not in r["resources"]]
    assert all(r["operations"] == ["CREATE", "UPDATE"] for r in others)
    assert sorted(res for r in rules for res in r["resources"]) == sorted(r for _g, r in ap.KIND_RESOURCES.values())


def test_an_object_without_metadata_or_spec_is_judged_without_an_error(policies):
    assert judge(policies, {"apiVersion": "v1", "kind": "Pod"}) == frozenset()
    assert judge(policies, {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "x"}}) == frozenset()
    assert judge(policies, {"kind": "PodGroup", "metadata": {"name": "g"}}) == {("podgroup-queue-missing", "warning")}


# ---------------------------------------------------------------- the objects
@pytest.fixture(scope="module")
def schema():
    return json.loads((FIXTURES / "validatingadmissionpolicy-v1.schema.json").read_text())


@pytest.mark.parametrize("action", ap.ACTIONS)
@pytest.mark.parametrize("selector", [SELECTOR, {"matchExpressions": [
    {"key": "team", "operator": "In", "values": ["ml", "cv"]}, {"key": "kai", "operator": "Exists"}]}])
def test_the_objects_are_valid_against_the_published_schema(schema, action, selector):
    jsonschema.Draft202012Validator.check_schema(schema)
    found = ap.objects(action=action, namespace_selector=selector)
    assert [o["kind"] for o in found] == [ap.POLICY_KIND, ap.BINDING_KIND] * 2
    for obj in found:
        jsonschema.Draft202012Validator(schema).validate(obj)
    assert found[1]["spec"] == {"policyName": ap.DEFAULT_NAME, "validationActions": [action],
                                "matchResources": {"namespaceSelector": selector}}
    assert found[3]["spec"]["validationActions"] == ["Warn"]
    assert found[3]["spec"]["policyName"] == found[2]["metadata"]["name"] == ap.DEFAULT_NAME + "-warnings"


@pytest.mark.parametrize("broken, where", [
    (lambda o: o["spec"].pop("matchConstraints"), "matchConstraints"),
    (lambda o: o["spec"].update(failurePolicy="Warn"), "failurePolicy"),
    (lambda o: o["spec"]["validations"][0].update(message="two\nlines"), "message"),
    (lambda o: o["spec"]["variables"][0].update(name="not-an-identifier"), "variables"),
    (lambda o: o["spec"]["matchConstraints"]["resourceRules"][0].update(operations=["PATCH"]), "operations"),
    (lambda o: o["spec"].update(validation=[]), "additional"),
])
def test_the_schema_refuses_what_the_api_refuses(schema, generated, broken, where):
    obj = copy.deepcopy(generated[0])
    broken(obj)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(obj)


def test_the_schema_refuses_deny_with_warn(schema, generated):
    binding = copy.deepcopy(generated[1])
    binding["spec"]["validationActions"] = ["Deny", "Warn"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(binding)


@pytest.mark.parametrize("kwargs, parameter, words", [
    ({"action": "deny"}, "action", "must be one of Warn, Deny"),
    ({"failure_policy": "Open"}, "failure_policy", "must be one of Fail, Ignore"),
    ({"name": "Smshare_Rules"}, "name", "DNS subdomain"),
    ({"namespace_selector": {}}, "namespace_selector", "every namespace"),
    ({"namespace_selector": None}, "namespace_selector", "label selector"),
    ({"namespace_selector": {"matchLabels": {}}}, "namespace_selector", "selects every namespace"),
    ({"namespace_selector": {"matchLabels": {"team": True}}}, "namespace_selector", "quote numbers and booleans"),
    ({"namespace_selector": {"matchLabels": {"bad key!": "x"}}}, "namespace_selector", "not a label key"),
    ({"namespace_selector": {"matchExpressions": [{"key": "team", "operator": "In"}]}}, "namespace_selector",
     "needs values"),
    ({"namespace_selector": {"matchExpressions": [{"key": "team", "operator": "Has"}]}}, "namespace_selector",
     "operator of In, NotIn, Exists, DoesNotExist"),
    ({"namespace_selector": {"labels": {"a": "b"}}}, "namespace_selector", "matchLabels and/or matchExpressions"),
])
def test_bad_inputs_are_refused_by_name(kwargs, parameter, words):
    arguments = dict({"namespace_selector": SELECTOR}, **kwargs)
    with pytest.raises(ap.BadInput) as info:
        ap.objects(**arguments)
    assert info.value.parameter == parameter and words in info.value.msg


# ---------------------------------------------------------------- the cluster's version
def cluster(version, group_versions):
    major, minor = version.lstrip("v").split(".")[:2]
    apis = {"v1": {"Pod": {}}}
    for group_version in group_versions:
        apis[group_version] = {"ValidatingAdmissionPolicy": {"preferred": True},
                               "ValidatingAdmissionPolicyBinding": {"preferred": True}}
    apis.setdefault("admissionregistration.k8s.io/v1", {"ValidatingWebhookConfiguration": {},
                                                        "MutatingWebhookConfiguration": {}})
    return {"apis": apis, "version": {"server": {"kubernetes": {"gitVersion": version, "major": major,
                                                                "minor": minor}}}}


def test_the_labs_kubernetes_1_20_is_refused_by_name():
    result = ap.served(cluster("v1.20.2", []))
    assert not result["ok"] and result["version"] == "v1.20.2"
    assert result["message"].startswith(
        "Kubernetes v1.20.2 does not serve admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy and "
        "ValidatingAdmissionPolicyBinding: the API is served from Kubernetes 1.30 (GA)")
    assert result["message"].endswith("Nothing was changed.")


def test_a_cluster_with_only_the_beta_api_is_refused_naming_it():
    result = ap.served(cluster("v1.29.4", ["admissionregistration.k8s.io/v1beta1"]))
    assert not result["ok"] and "it serves only admissionregistration.k8s.io/v1beta1" in result["message"]


def test_kubernetes_1_30_is_served():
    result = ap.served(cluster("v1.30.1", ["admissionregistration.k8s.io/v1"]))
    assert result["ok"] and result["message"] == ("Kubernetes v1.30.1 serves admissionregistration.k8s.io/v1 "
                                                  "ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding")


def test_an_unreadable_cluster_info_is_refused():
    assert not ap.served({})["ok"] and "(version unknown)" in ap.served(None)["message"]


# ---------------------------------------------------------------- the role's README
def test_the_roles_readme_lists_every_rule_cel_cannot_check_and_the_runtime():
    text = (REPO / "roles" / "admission_policy" / "README.md").read_text(encoding="utf-8")
    section = text.split("## Rules the policy cannot check", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `([a-z-]+)` \|", section, re.M))
    assert listed == set(wr.NEEDS)
    checked = text.split("## Rules the policy checks", 1)[1].split("\n## ", 1)[0]
    assert set(re.findall(r"`([a-z-]+)`", checked)) >= set(ap.cel_rules())
    assert "cel-expr-python==" in text and "1.20" in text
