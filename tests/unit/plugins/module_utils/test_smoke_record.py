"""module_utils/smoke_record.py and its filters: which nodes a converge smoke-tests again."""
import json

import pytest

from ansible.errors import AnsibleFilterError
from ansible_collections.smshare.kai.plugins.filter import smoke_record as filters
from ansible_collections.smshare.kai.plugins.module_utils import smoke_record as sr

HOUR = 3600.0
NOW = 1_800_000_000.0
INPUTS = {"fraction": 0.5, "image": "nvidia/cuda:13.3.1-base-ubuntu24.04"}


def node(name, boot="boot-1", driver="615.1.0", gpus="1", **labels):
    labels = dict({"nvidia.com/cuda.driver-version.full": driver, "kubernetes.io/hostname": name}, **labels)
    return {"metadata": {"name": name, "labels": labels},
            "status": {"allocatable": {"nvidia.com/gpu": gpus},
                       "nodeInfo": {"bootID": boot, "kernelVersion": "6.8.0", "kubeletVersion": "v1.31.0",
                                    "containerRuntimeVersion": "containerd://2.0.0"}}}


def secret(uid, version, status="deployed"):
    return {"metadata": {"uid": uid, "labels": {"owner": "helm", "status": status, "version": str(version)}}}


def releases(kai_uid="u-kai-2", frac_uid="u-frac-1"):
    return [{"namespace": "kai-scheduler", "name": "kai-scheduler",
             "secrets": [secret("u-kai-1", 1, "superseded"), secret(kai_uid, 2)]},
            {"namespace": "gpu-fractioning", "name": "gpu-fractioning", "secrets": [secret(frac_uid, 1)]}]


NODES = [node("gpu-0"), node("gpu-1")]


def passed(nodes=None, rel=None, inputs=None, at=NOW - HOUR):
    """The record after every node passed at `at`."""
    nodes, inputs = nodes or NODES, inputs or INPUTS
    first = sr.plan([n["metadata"]["name"] for n in nodes], nodes, rel or releases(), inputs, sr.parse_record(None),
                    at, 24 * HOUR)
    data = sr.record_data(sr.updated_record(sr.parse_record(None), first, first["run"], at))
    return {"kind": "ConfigMap", "data": data}


def plan_now(record, nodes=None, rel=None, inputs=None, max_age=24 * HOUR, always=False, wanted=("gpu-0", "gpu-1")):
    return sr.plan(list(wanted), nodes or NODES, rel or releases(), inputs or INPUTS, sr.parse_record(record), NOW,
                   max_age, always)


def test_with_no_record_every_node_runs():
    result = plan_now(None)
    assert result["run"] == ["gpu-0", "gpu-1"] and result["skip"] == []
    assert result["reasons"]["gpu-0"] == "no recorded pass"


def test_a_converged_fleet_that_passed_lately_runs_nothing():
    result = plan_now(passed())
    assert result["run"] == [] and result["skip"] == ["gpu-0", "gpu-1"]
    assert "passed 1.0 h ago" in result["reasons"]["gpu-0"]


def test_a_rebooted_node_runs_alone():
    result = plan_now(passed(), nodes=[node("gpu-0", boot="boot-2"), node("gpu-1")])
    assert result["run"] == ["gpu-0"] and result["skip"] == ["gpu-1"]
    assert "changed since its last pass" in result["reasons"]["gpu-0"]


@pytest.mark.parametrize("changed", [
    {"nodes": [node("gpu-0", driver="615.2.0"), node("gpu-1", driver="615.2.0")]},   # operator-path driver change
    {"nodes": [node("gpu-0", gpus="2"), node("gpu-1", gpus="2")]},
    {"nodes": [node("gpu-0", **{"nvidia.com/mig.config": "all-1g.10gb"}),
               node("gpu-1", **{"nvidia.com/mig.config": "all-1g.10gb"})]},
    {"rel": releases(kai_uid="u-kai-3")},          # an upgrade of KAI
    {"rel": releases(frac_uid="u-frac-reinstalled")},   # a reinstall: revision 1 again, a new Secret
    {"inputs": dict(INPUTS, fraction=0.25)},
], ids=["driver-label", "gpus", "mig", "release-upgrade", "release-reinstall", "inputs"])
def test_what_the_fractions_depend_on_changing_runs_every_node(changed):
    assert plan_now(passed(), **changed)["run"] == ["gpu-0", "gpu-1"]


def test_a_label_the_fractions_do_not_depend_on_changes_nothing():
    nodes = [node("gpu-0", **{"team": "vision"}), node("gpu-1")]
    assert plan_now(passed(), nodes=nodes)["run"] == []


def test_an_old_pass_runs_again_and_says_how_old():
    result = plan_now(passed(at=NOW - 30 * HOUR))
    assert result["run"] == ["gpu-0", "gpu-1"]
    assert result["reasons"]["gpu-0"] == "last pass 30.0 h ago, older than 24.0 h"


def test_max_age_zero_and_always_run_every_node():
    assert plan_now(passed(), max_age=0)["run"] == ["gpu-0", "gpu-1"]
    result = plan_now(passed(), always=True)
    assert result["run"] == ["gpu-0", "gpu-1"] and "always" in result["reasons"]["gpu-1"]


def test_a_wanted_node_the_cluster_does_not_list_runs_so_the_test_names_it():
    result = plan_now(passed(), wanted=("gpu-0", "gpu-9"))
    assert result["run"] == ["gpu-9"] and result["reasons"]["gpu-9"] == "not a Node of the cluster"


def test_a_missing_release_is_part_of_the_fingerprint():
    gone = [dict(releases()[0]), {"namespace": "gpu-fractioning", "name": "gpu-fractioning", "secrets": []}]
    assert sr.release_state(gone)["gpu-fractioning/gpu-fractioning"] == "absent"
    assert sr.release_state(releases())["kai-scheduler/kai-scheduler"] == "u-kai-2"   # the deployed, newest one
    assert plan_now(passed(), rel=gone)["run"] == ["gpu-0", "gpu-1"]


def test_the_record_keeps_what_did_not_run_and_drops_what_failed():
    before = passed()
    planned = plan_now(before, nodes=[node("gpu-0", boot="b2"), node("gpu-1", boot="b2")])
    after = sr.parse_record({"data": sr.record_data(sr.updated_record(sr.parse_record(before), planned, ["gpu-1"], NOW))})
    assert sorted(after["nodes"]) == ["gpu-1"]     # gpu-0 ran and failed: no pass on record
    assert after["nodes"]["gpu-1"]["passed_at"] == NOW
    skipped_one = plan_now(before, nodes=[node("gpu-0", boot="b3"), node("gpu-1")])
    kept = sr.updated_record(sr.parse_record(before), skipped_one, ["gpu-0"], NOW)
    assert kept["nodes"]["gpu-1"] == sr.parse_record(before)["nodes"]["gpu-1"]


@pytest.mark.parametrize("data", [None, {}, {"record.json": "not json"}, {"record.json": "[]"},
                                  {"record.json": json.dumps({"version": 99, "nodes": {}})},
                                  {"record.json": json.dumps({"version": 1, "nodes": {"a": "x", "b": {"fingerprint": 3}}})},
                                  {"record.json": json.dumps({"version": 1, "nodes": {"a": {"fingerprint": "f", "passed_at": "soon"}}})}])
def test_a_record_that_does_not_parse_counts_as_none(data):
    assert sr.parse_record({"data": data} if data is not None else None) == {"version": 1, "nodes": {}}


def test_a_fleet_of_five_thousand_nodes_fits_in_one_configmap():
    nodes = [node("gpu-%d" % i) for i in range(5000)]
    record = passed(nodes=nodes)
    assert len(record["data"]["record.json"]) < 1024 * 1024 / 2


def test_the_filters_take_ansible_values_and_refuse_bad_ones():
    rel = releases()
    names = [{"namespace": r["namespace"], "name": r["name"]} for r in rel]
    result = filters.smoke_plan(["gpu-0"], NODES, names, [r["secrets"] for r in rel], INPUTS, passed(), 24, now=NOW)
    assert result["lines"] == ["gpu-0: not tested, passed 1.0 h ago with the same node, releases and inputs"]
    assert result["skip"] == ["gpu-0"]
    data = filters.smoke_record_data(result, [], passed(), now=NOW)
    assert json.loads(data["record.json"])["nodes"]["gpu-0"]["passed_at"] == NOW - HOUR
    for hours in ("soon", -1, float("nan")):
        with pytest.raises(AnsibleFilterError, match="max_age_hours"):
            filters.smoke_plan(["gpu-0"], NODES, names, [[], []], INPUTS, None, hours)
    with pytest.raises(AnsibleFilterError, match="as lists"):
        filters.smoke_plan("gpu-0", NODES, names, [[], []], INPUTS)
    with pytest.raises(AnsibleFilterError, match="2 releases but 1 lists"):
        filters.smoke_plan(["gpu-0"], NODES, names, [[]], INPUTS)
    with pytest.raises(AnsibleFilterError, match="names of the nodes"):
        filters.smoke_record_data(result, "gpu-0")
