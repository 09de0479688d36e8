# Apache-2.0
"""workload_lint run in-process on files and objects (live objects: tests/integration/queues)."""
import os

import pytest

from ansible.module_utils import basic
import yaml


from ansible_collections.smshare.kai.plugins.modules import workload_lint
from module_runner import run_module

GOOD = {"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "half-gpu", "namespace": "gpu-trial", "labels": {"kai.scheduler/queue": "ml-team"},
                     "annotations": {"gpu-fraction": "0.5"}},
        "spec": {"schedulerName": "kai-scheduler", "securityContext": {"runAsNonRoot": True, "runAsUser": 1000},
                 "containers": [{"name": "gpu-workload"}]}}
TREE = [{"name": "research"}, {"name": "ml-team", "parent": "research"}]


def run(monkeypatch, args):
    return run_module(monkeypatch, workload_lint.main, args)


def with_label(queue):
    obj = yaml.safe_load(yaml.safe_dump(GOOD))
    obj["metadata"]["labels"]["kai.scheduler/queue"] = queue
    return obj


@pytest.fixture
def manifests(tmp_path):
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(GOOD))
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump_all([with_label("research"), with_label("nope")]))
    return tmp_path


def test_clean_manifests_pass(monkeypatch, tmp_path):
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(GOOD))
    done = run(monkeypatch, {"paths": [str(tmp_path)], "queues": TREE})
    assert not done.failed
    assert done.result["changed"] is False
    assert done.result["summary"] == "0 errors, 0 warnings in 1 object checked"
    assert done.result["files"] == [str(tmp_path / "ok.yaml")]


def test_violations_fail_with_every_line(monkeypatch, manifests):
    done = run(monkeypatch, {"paths": [str(manifests)], "queues": TREE})
    assert done.failed and done.result["failure"] == "violations"
    assert done.result["error_count"] == 2 and done.result["checked"] == 3
    assert [f["rule"] for f in done.result["findings"]] == ["queue-not-leaf", "queue-unknown"]
    assert done.result["msg"].splitlines()[0] == "workload_lint: 2 errors, 0 warnings in 3 objects checked:"
    assert done.result["msg"].splitlines()[1].startswith(
        "ERROR: %s#1: Pod gpu-trial/half-gpu: metadata.labels[kai.scheduler/queue]: names queue 'research'"
        % (manifests / "bad.yaml"))


def test_fail_on_never_reports_only(monkeypatch, manifests):
    done = run(monkeypatch, {"paths": [str(manifests)], "queues": TREE, "fail_on": "never"})
    assert not done.failed and done.result["error_count"] == 2 and len(done.result["report"]) == 2


def test_fail_on_warning(monkeypatch):
    unlabelled = yaml.safe_load(yaml.safe_dump(GOOD))
    unlabelled["metadata"]["labels"] = {}
    assert not run(monkeypatch, {"objects": [unlabelled]}).failed
    done = run(monkeypatch, {"objects": [unlabelled], "fail_on": "warning"})
    assert done.failed and done.result["warning_count"] == 1
    assert done.result["findings"][0]["source"] == "objects[0]"


def test_a_fractional_pod_that_may_run_as_root(monkeypatch):
    notes = yaml.safe_load(yaml.safe_dump(GOOD))
    del notes["spec"]["securityContext"]  # the notes' half-GPU example: a warning, not a failure
    done = run(monkeypatch, {"objects": [notes]})
    assert not done.failed and done.result["warning_count"] == 1
    assert [(f["rule"], f["severity"], f["field"]) for f in done.result["findings"]] == [
        ("fraction-runs-as-root", "warning", "spec.securityContext.runAsNonRoot")]
    assert run(monkeypatch, {"objects": [notes], "fail_on": "warning"}).failed
    notes["spec"]["containers"][0]["securityContext"] = {"runAsUser": 0}
    done = run(monkeypatch, {"objects": [notes]})
    assert done.failed and done.result["failure"] == "violations" and done.result["error_count"] == 1
    assert done.result["report"][0].startswith(
        "ERROR: objects[0]: Pod gpu-trial/half-gpu: spec.containers[0].securityContext.runAsUser: is 0, so container "
        "'gpu-workload' runs as root in a pod that asks for a GPU share")
    assert done.result["report"][0].endswith("[fraction-runs-as-root]")


def test_without_queues_the_tree_rules_are_skipped(monkeypatch, manifests):
    assert not run(monkeypatch, {"paths": [str(manifests)]}).failed


def test_a_path_that_does_not_exist(monkeypatch, tmp_path):
    done = run(monkeypatch, {"paths": [str(tmp_path / "missing")]})
    assert done.failed and done.result["failure"] == "bad_input" and done.result["parameter"] == "paths"
    assert "no such file or directory" in done.result["msg"]


def test_a_bad_namespace_is_refused_before_any_cluster_call(monkeypatch):
    done = run(monkeypatch, {"namespaces": ["gpu-trial", "Bad_NS"]})
    assert done.failed and done.result["failure"] == "bad_input"
    assert done.result["msg"] == "namespaces[1]='Bad_NS': must be a namespace name, for example gpu-trial"


def test_something_to_check_is_required(monkeypatch):
    done = run(monkeypatch, {"fail_on": "never"})
    assert done.failed and done.result["failure"] == "bad_input"
    assert done.result["msg"] == "nothing to check: give paths, objects or namespaces"


def test_nothing_found_is_a_warning(monkeypatch, tmp_path):
    warned = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, text: warned.append(text))
    done = run(monkeypatch, {"paths": [str(tmp_path)]})
    assert not done.failed and done.result["checked"] == 0
    assert warned == ["no Kubernetes objects were found to check: are the paths or namespaces right?"]


def test_unreachable_cluster_is_a_named_failure(monkeypatch, unreachable_kubeconfig):
    done = run(monkeypatch, {"namespaces": ["gpu-trial"], "kubeconfig": str(unreachable_kubeconfig)})
    assert done.failed and done.result["failure"] == "cluster"
    # the kubeconfig loaded: the server refused, and the message says so
    assert done.result["msg"].startswith("cannot reach the API server at https://127.0.0.1:1"), done.result["msg"]


def test_a_kubeconfig_that_cannot_be_loaded_is_named(monkeypatch, tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\nusers: []\n")
    done = run(monkeypatch, {"namespaces": ["gpu-trial"], "kubeconfig": str(kubeconfig)})
    assert done.failed and done.result["msg"].startswith("cannot load kubeconfig %s" % kubeconfig), done.result


# ---------------------------------------------------------------- hostile repositories
def by_rule(done):
    return sorted((f["rule"], f["source"].rsplit("/", 1)[-1], f["message"]) for f in done.result["findings"])


@pytest.mark.parametrize("name, content, words", [
    ("binary.yaml", b"\x7fELF\x02\x01\x01\x00\x00rest", ["binary file", "offset 7"]),
    ("latin1.yaml", "metadata:\n  name: caf\xe9\n".encode("latin-1"), ["not UTF-8", "0xe9", "offset 21"]),
    ("deep.yaml", b"[" * 20000 + b"]" * 20000, ["nest"]),   # libyaml: "maximum nesting depth"
])
def test_an_unreadable_file_is_a_finding_and_the_others_are_still_checked(monkeypatch, tmp_path, name, content,
                                                                          words):
    (tmp_path / name).write_bytes(content)
    (tmp_path / "z-ok.yaml").write_text(yaml.safe_dump(GOOD))
    (tmp_path / "z-bad.yaml").write_text(yaml.safe_dump(with_label("nope")))
    done = run(monkeypatch, {"paths": [str(tmp_path)], "queues": TREE, "fail_on": "never"})
    assert not done.failed, done.result
    rules = by_rule(done)
    assert [r[:2] for r in rules] == [("parse", name), ("queue-unknown", "z-bad.yaml")], rules
    assert all(w in rules[0][2] for w in words), rules[0]
    assert done.result["checked"] == 2


def test_a_fifo_is_never_opened(monkeypatch, tmp_path):
    os.mkfifo(str(tmp_path / "pipe.yaml"))
    (tmp_path / "ok.yaml").write_text(yaml.safe_dump(GOOD))
    done = run(monkeypatch, {"paths": [str(tmp_path), str(tmp_path / "pipe.yaml")], "fail_on": "never"})
    assert [r[:2] for r in by_rule(done)] == [("not-read", "pipe.yaml")] * 2
    assert "not a regular file" in by_rule(done)[0][2] and done.result["checked"] == 1


def test_size_limits(monkeypatch, tmp_path):
    (tmp_path / "a-big.yaml").write_text(yaml.safe_dump(GOOD) + "#" * 2000)
    (tmp_path / "b-ok.yaml").write_text(yaml.safe_dump(GOOD))
    done = run(monkeypatch, {"paths": [str(tmp_path)], "max_file_bytes": 1000, "fail_on": "never"})
    assert [r[:2] for r in by_rule(done)] == [("not-read", "a-big.yaml")] and done.result["checked"] == 1
    assert "over the limit of 1000 per file" in by_rule(done)[0][2]
    done = run(monkeypatch, {"paths": [str(tmp_path)], "max_total_bytes": 2500, "fail_on": "never"})
    assert [r[:2] for r in by_rule(done)] == [("not-read", "b-ok.yaml")] and done.result["checked"] == 1


def test_an_alias_bomb_stops_at_the_object_limit(monkeypatch, tmp_path):
    """Nine levels of ten aliases: a billion pods if expanded."""
    lines = ["a0: &a0 %s" % yaml.safe_dump(GOOD, default_flow_style=True).strip()]
    for level in range(1, 10):
        lines.append("a%d: &a%d {kind: List, items: [%s]}" % (level, level, ", ".join(["*a%d" % (level - 1)] * 10)))
    lines.append("kind: List\nitems: [*a9]")
    (tmp_path / "bomb.yaml").write_text("\n".join(lines) + "\n")
    done = run(monkeypatch, {"paths": [str(tmp_path)], "max_objects": 500, "fail_on": "never"})
    assert done.result["checked"] == 500
    assert [r[:2] for r in by_rule(done)] == [("not-read", "bomb.yaml")]
    assert "limit of 500 objects" in by_rule(done)[0][2]


def test_list_nesting_limit(monkeypatch, tmp_path):
    nested = GOOD
    for _level in range(5):
        nested = {"kind": "List", "items": [nested]}
    (tmp_path / "nested.yaml").write_text(yaml.safe_dump(nested))
    done = run(monkeypatch, {"paths": [str(tmp_path)], "max_list_depth": 3, "fail_on": "never"})
    assert [r[:2] for r in by_rule(done)] == [("not-read", "nested.yaml")] and done.result["checked"] == 0
    assert run(monkeypatch, {"paths": [str(tmp_path)], "fail_on": "never"}).result["checked"] == 1


@pytest.mark.parametrize("name", ["max_file_bytes", "max_total_bytes", "max_objects", "max_list_depth"])
def test_a_limit_below_one_is_refused(monkeypatch, tmp_path, name):
    done = run(monkeypatch, {"paths": [str(tmp_path)], name: 0})
    assert done.failed and done.result["parameter"] == name and "must be 1 or more" in done.result["msg"]


def test_the_sharing_mode_is_an_input_and_a_bad_one_is_refused(monkeypatch):
    done = run(monkeypatch, {"objects": [GOOD], "sharing_mode": "Disabled"})
    assert done.failed and [f["rule"] for f in done.result["findings"]] == ["sharing-mode"]
    assert not run(monkeypatch, {"objects": [GOOD], "sharing_mode": "NvFractions"}).failed
    bad = run(monkeypatch, {"objects": [GOOD], "sharing_mode": "nvfractions"})
    assert bad.failed and "NvFractions" in bad.result["msg"]


def test_a_podgroup_in_a_file_and_the_job_that_joins_it_given_inline_are_one_run(monkeypatch, tmp_path):
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "team-gang", "namespace": "gpu-trial"}, "spec": {"queue": "ml-team", "minMember": 3}}
    (tmp_path / "podgroup.yaml").write_text(yaml.safe_dump(group))
    joiner = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": "member", "namespace": "gpu-trial",
                           "annotations": {"pod-group-name": "team-gang", "kai.scheduler/skip-podgrouper": "true"}},
              "spec": {"schedulerName": "kai-scheduler", "containers": [{"name": "main"}]}}
    done = run(monkeypatch, {"paths": [str(tmp_path)], "objects": [joiner], "queues": TREE})
    assert not done.failed and done.result["checked"] == 2
    assert [(f["rule"], f["source"]) for f in done.result["findings"]] == [
        ("podgroup-members", str(tmp_path / "podgroup.yaml"))]


def test_the_sharing_mode_is_given_or_read_not_both(monkeypatch):
    done = run(monkeypatch, {"objects": [GOOD], "sharing_mode": "NvFractions", "sharing_mode_from_cluster": True})
    assert done.failed and done.result["failure"] == "bad_input"
    assert done.result["msg"] == ("sharing_mode=NvFractions and sharing_mode_from_cluster=true: give the mode or read "
                                  "it from the cluster, not both")


def test_the_result_names_the_mode_the_rules_took(monkeypatch):
    assert run(monkeypatch, {"objects": [GOOD], "sharing_mode": "NvFractions"}).result["sharing_mode"] == "NvFractions"
    assert run(monkeypatch, {"objects": [GOOD]}).result["sharing_mode"] is None


def test_the_reports_come_with_the_failure_they_explain(monkeypatch):
    bad = with_label("research")
    bad["metadata"]["annotations"]["gpu-fraction"] = "1.5"
    done = run(monkeypatch, {"objects": [bad], "report_formats": ["junit", "sarif"]})
    assert done.failed and done.result["failure"] == "violations"
    assert "<failure" in done.result["junit"] and done.result["sarif"]["runs"][0]["results"][0]["ruleId"]
    assert "junit" not in run(monkeypatch, {"objects": [GOOD]}).result
