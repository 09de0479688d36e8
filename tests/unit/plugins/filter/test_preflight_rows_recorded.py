# Apache-2.0
"""The preflight role's rows, made by its filters from what its task files
registered, as the role's Jinja made them (the cases and the recording in
tests/unit/plugins/module_utils/fixtures/preflight_rows: README.md there); the
inputs reach the filters as roles/preflight/vars/main.yml passes them."""
import json
from pathlib import Path

import pytest
import yaml
from ansible.errors import AnsibleFilterError

from ansible_collections.smshare.kai.plugins.filter import preflight_rows as filters

REPO = Path(__file__).resolve().parents[4]
FIXTURES = REPO / "tests/unit/plugins/module_utils/fixtures/preflight_rows"
CASES = yaml.safe_load((FIXTURES / "cases.yml").read_text())["cases"]
RECORDED = json.loads((FIXTURES / "recorded.json").read_text())["preflight"]
DEFAULTS = yaml.safe_load((REPO / "roles/preflight/defaults/main.yml").read_text())
# The Jinja stopped this host with a template error (README.md): no rows recorded.
CRASHED = {"runtime-nothing-there"}
RECORDED_CASES = [c for c in CASES if c["name"] not in CRASHED]


def table_rows(case):
    """The host's rows as vars/main.yml puts them together."""
    knob = dict(DEFAULTS, **case["vars"])
    got = dict(case["vars"])
    rows = []
    if "driver" in case["parts"]:
        rows += filters.preflight_driver_rows(got["_preflight_gpu"], got.get("_preflight_mps"),
                                              knob["preflight_driver_branch"], knob["preflight_min_cuda_version"],
                                              knob["preflight_driver_managed"], knob["preflight_driver_method"])
    if "runtime" in case["parts"]:
        reads = dict((name, got.get("_preflight_" + name)) for name in (
            "cri", "cri_target", "nri", "containerd_version", "containerd_config", "microk8s", "k3s"))
        rows += filters.preflight_runtime_rows(reads, {
            "cri_socket": knob["preflight_cri_socket_path"],
            "cri_socket_link_target": knob.get("preflight_cri_socket_link_target") or "",
            "nri_socket": knob["preflight_nri_socket_path"],
            "containerd_config": knob["preflight_containerd_config_path"],
            "microk8s_dir": knob["preflight_microk8s_dir"], "k3s_cri_socket": knob["preflight_k3s_cri_socket_path"]})
    if "cluster" in case["parts"]:
        reads = dict((name, got.get("_preflight_" + name)) for name in (
            "access", "runtime_class", "nodes", "all_nodes", "workloads", "mps_exec"))
        minimum = knob.get("preflight_gpu_operator_minimum_version", "v26.7.1")
        rows += filters.preflight_cluster_rows(reads, {
            "kubeconfig": knob.get("preflight_kubeconfig", ""), "runtime_class": knob["preflight_runtime_class"],
            "gpu_node_selector": knob["preflight_gpu_node_selector"],
            "min_containerd_version": knob["preflight_min_containerd_version"], "gpu_operator_minimum": minimum,
            "gpu_stack_floors": knob["preflight_gpu_stack_floors"],
            "mpsd_memory_limit": knob.get("preflight_mpsd_memory_limit"),
            "driver_method": knob["preflight_driver_method"],
            "gpu_operator_namespace": knob["preflight_gpu_operator_namespace"],
            "driver_daemonset": knob["preflight_driver_daemonset"], "driver_managed": knob["preflight_driver_managed"]})
    return rows


@pytest.mark.parametrize("case", RECORDED_CASES, ids=lambda c: c["name"])
def test_rows_are_the_recorded_ones(case):
    assert table_rows(case) == RECORDED[case["name"]]["rows"]


@pytest.mark.parametrize("case", RECORDED_CASES, ids=lambda c: c["name"])
def test_the_verdict_says_what_the_role_said(case):
    verdict = filters.preflight_verdict(table_rows(case), case["name"])
    recorded = RECORDED[case["name"]]["verdict"]
    assert verdict["ok"] is not recorded["failed"]
    assert (verdict["summary"] if verdict["ok"] else verdict["message"]) == recorded["msg"]


def test_a_node_without_containerd_gets_its_table():
    """`containerd --version` printed nothing: the Jinja stopped on it; NRI is then
    judged as containerd 2.x's default (containerd_nri's rule for an unknown version)."""
    [case] = [c for c in CASES if c["name"] == "runtime-nothing-there"]
    assert [(r["check"], r["found"], r["status"]) for r in table_rows(case)] == [
        ("CRI socket", "missing", "FAIL"), ("NRI socket", "regular file", "FAIL"),
        ("NRI in containerd config", "enabled by default (containerd 2.x)", "PASS")]


def test_pending_rows_pass_and_are_named():
    verdict = filters.preflight_verdict([
        {"check": "a", "found": "x", "wanted": "y", "status": "PASS", "fix": ""},
        {"check": "driver branch", "found": None, "wanted": "r615", "status": "PENDING", "fix": "later"}], "h")
    assert verdict["ok"] and verdict["passed"] == 1 and verdict["pending"] == ["driver branch"]
    assert verdict["summary"] == "1 rows passed , driver branch pending (converged later in this run)"


def test_a_failed_row_shows_none_as_a_template_does():
    verdict = filters.preflight_verdict([{"check": "c", "found": None, "wanted": "w", "status": "FAIL", "fix": "f"}],
                                        "h")
    assert not verdict["ok"]
    assert verdict["message"] == "Preflight failed on h (1 of 1 rows): [c: found , wanted w; f]  Nothing was installed."


@pytest.mark.parametrize("call", [
    lambda: filters.preflight_driver_rows("not a result"),
    lambda: filters.preflight_runtime_rows({}, {"cri_socket": "/run/c.sock"}),
    lambda: filters.preflight_cluster_rows({}, {"kubeconfig": "k"}),
    lambda: filters.preflight_cluster_rows({}, dict(
        kubeconfig="k", runtime_class="nvidia", gpu_node_selector="a!=b", min_containerd_version="2.0",
        gpu_stack_floors={}, driver_method="host", gpu_operator_namespace="gpu-operator",
        driver_daemonset="nvidia-driver-daemonset")),
    lambda: filters.preflight_verdict("rows", "h"),
], ids=["gpu-not-a-mapping", "runtime-paths-missing", "cluster-settings-missing", "set-based-selector",
        "rows-not-a-list"])
def test_refusals_are_filter_errors(call):
    with pytest.raises(AnsibleFilterError):
        call()
