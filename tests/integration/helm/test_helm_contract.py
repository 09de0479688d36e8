"""Contract: what kubernetes.core 6.2's helm and helm_info send, the lab's helm shim accepts.

kubernetes.core runs the argv recorder as its helm binary. The recorder passes
every argv through the shim's parser; offline subcommands (version, plugin
list, show chart, dependency update, repo update) run in the real shim, cluster
ones answer with text made by the shim's own formatters. No cluster needed.
"""
import json
from pathlib import Path

import pytest
import yaml

from helm_test_helpers import PLAYBOOKS, RECORDER, argv_of, by_tag, copy_charts, read_log, run_playbook
from helm_shim.argv import parse
from helm_shim.commands import _deploy_options, list_row, to_yaml

RELEASE = {
    "name": "demo", "namespace": "lab-contract", "revision": 2, "status": "deployed",
    "deployed_at": "2026-01-02T03:04:05.120000Z", "chart_name": "smshare-demo",
    "chart_version": "0.1.0", "app_version": "1.0.0",
}
DONE = "Release \"demo\" has been upgraded. Happy Helming!\nNAME: demo\n"
DIFF = ("lab-contract, demo-greeting, ConfigMap (v1) has changed:\n"
        "  kind: ConfigMap\n-   greeting: \"hello\"\n+   greeting: \"changed\"\n")


def canned(release_present, diff=DIFF):
    answers = {"upgrade": DONE, "install": "NAME: demo\n",
               "uninstall": 'release "demo" uninstalled\n',
               "get manifest": "---\n# Source: smshare-demo/templates/configmap.yaml\n"
                               "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: demo\n",
               "get notes": "NOTES:\ndemo says hello.\n",
               "get hooks": "---\n# Source: smshare-demo/templates/post-install-hook.yaml\n"
                            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: hook\n"}
    if release_present:
        answers["list"] = to_yaml([list_row(RELEASE)])
        answers["get values"] = to_yaml({"greeting": "hello"})
        answers["diff upgrade"] = diff
    else:
        answers["list"] = to_yaml([])
        answers["get values"] = "null\n"
    return answers


@pytest.fixture(scope="module")
def contract(tmp_path_factory):
    """Run the contract playbook once; hand back (recorded calls, module results)."""
    work = tmp_path_factory.mktemp("helm-contract")
    charts = copy_charts(work)
    files = {}
    for state, answers in (("absent", canned(False)), ("present", canned(True)),
                           ("same", canned(True, diff=""))):
        files[state] = str(work / f"canned-{state}.json")
        (work / f"canned-{state}.json").write_text(json.dumps(answers))
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "lab-context",
        "clusters": [{"name": "lab", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "contexts": [{"name": "lab-context", "context": {"cluster": "lab"}}],
        "users": [{"name": "admin", "user": {"token": "t"}}]}))
    values_file = work / "extra-values.yaml"
    values_file.write_text("greeting: from-values-file\n")
    log = work / "recorded.jsonl"
    extra = {
        "helm_test_workdir": str(work),
        "helm_contract_recorder": str(RECORDER),
        "helm_contract_chart": str(charts / "smshare-demo"),
        "helm_contract_umbrella": str(charts / "smshare-umbrella"),
        "helm_contract_values_file": str(values_file),
        "helm_contract_kubeconfig": str(kubeconfig),
        "helm_contract_canned": files,
        "helm_contract_results": str(work / "results.json"),
    }
    run_playbook(PLAYBOOKS / "contract.yml", extra,
                 env={"SMSHARE_HELM_RECORDER_LOG": str(log)})
    results = json.loads((work / "results.json").read_text())
    return read_log(log), results, extra


def test_every_call_kubernetes_core_made_was_accepted(contract):
    entries = contract[0]
    expected_failures = ("repo_update", "post_renderer")
    wanted = [e for e in entries if e["tag"] not in expected_failures]
    assert wanted, "the recorder saw no helm call at all"
    refused = [e for e in wanted if e["rc"] != 0]
    assert not refused, f"the shim refused calls kubernetes.core makes: {refused}"
    for entry in wanted:
        parse(entry["argv"])  # raises on anything the parser would not take


def test_version_and_plugin_list_are_parsed(contract):
    entries, results, _extra = contract
    versions = argv_of(entries, "version")
    assert versions and all(e["stdout"].startswith('version.BuildInfo{Version:"v4.') for e in versions)
    plugins = argv_of(by_tag(entries, "upgrade"), "plugin", "list")
    assert plugins and plugins[0]["stdout"].startswith("NAME\tVERSION\tDESCRIPTION\ndiff\t3.9.")
    # the built-in diff counts as helm-diff: no fallback warning from kubernetes.core
    assert not any("helm diff" in w for w in results["upgrade"].get("warnings", []))


def test_install_argv_carries_every_option(contract):
    entries, results, extra = contract
    install = by_tag(entries, "install")
    shows = argv_of(install, "show", "chart")
    assert shows[0]["argv"] == ["--version=0.1.0", "show", "chart", extra["helm_contract_chart"],
                                "--insecure-skip-tls-verify", "--plain-http"]
    assert shows[0]["rc"] == 0 and yaml.safe_load(shows[0]["stdout"])["name"] == "smshare-demo"
    deploys = argv_of(install, "upgrade")
    assert len(deploys) == 1, install
    parsed = parse(deploys[0]["argv"])
    assert parsed.args == ["demo", extra["helm_contract_chart"]]
    assert parsed.get("install") and parsed.get("reset_values")
    assert parsed.get("values")[0] == extra["helm_contract_values_file"]
    assert len(parsed.get("values")) == 2  # values_files, then release_values' temp file
    assert parsed.get("set") == ["gadget.size=large"]
    assert parsed.get("set_string") == ["greeting=quoted words"]
    assert parsed.get("set_json") == ['extra={"a": [1, 2]}']
    assert parsed.get("set_file") == [f"note={extra['helm_contract_values_file']}"]
    options = _deploy_options(parsed, "upgrade")
    assert options == {
        "chart_version": "0.1.0", "insecure_skip_tls_verify": True, "plain_http": True,
        "wait": "watcher", "timeout_seconds": 150, "disable_hooks": True, "skip_crds": True,
        "skip_schema_validation": True, "rollback_on_failure": True, "reset_values": True,
        "reset_then_reuse_values": True, "max_history": 5}
    assert parsed.get("reuse_values") is False and parsed.get("create_namespace") is True
    env = deploys[0]["env"]
    assert env["HELM_NAMESPACE"] == "lab-contract"
    assert env["HELM_KUBEAPISERVER"] == "https://127.0.0.1:6443"
    assert env["HELM_KUBETOKEN"] == "not-a-real-token"
    assert env["HELM_KUBEINSECURE_SKIP_TLS_VERIFY"] == "true"
    assert "KUBECONFIG" in env
    assert results["install"]["changed"] is True


def test_upgrade_argv_and_diff_check(contract):
    entries, results, extra = contract
    upgrade = by_tag(entries, "upgrade")
    assert [e["argv"][:2] for e in argv_of(upgrade, "list")] == [["list", "--output=yaml"]] * 2
    values = argv_of(upgrade, "get", "values")
    assert values[0]["argv"] == ["get", "values", "--output=yaml", "demo"]
    diffs = argv_of(upgrade, "diff", "upgrade")
    assert len(diffs) == 1 and diffs[0]["canned"]
    preview = parse(diffs[0]["argv"])
    assert preview.args == ["demo", extra["helm_contract_chart"]]
    assert preview.get("reset_values") is True and preview.get("set") == ["gadget.size=large"]
    assert len(preview.get("values")) == 1  # release_values' temp file
    assert results["upgrade"]["diff"]["prepared"] == DIFF.strip()
    parsed = parse(argv_of(upgrade, "upgrade")[0]["argv"])
    options = _deploy_options(parsed, "upgrade")
    assert options["force_replace"] is True and options["take_ownership"] is True
    assert options["max_history"] == 3 and options["timeout_seconds"] == 60
    assert results["upgrade"]["changed"] is True
    # the status kubernetes.core read back comes from `list -o yaml` + `get values -o yaml`
    status = results["upgrade"]["status"]
    assert status["chart"] == "smshare-demo-0.1.0" and status["revision"] == "2"
    assert status["updated"] == "2026-01-02 03:04:05.12 +0000 UTC"
    assert status["values"] == {"greeting": "hello"}


def test_same_values_do_not_redeploy(contract):
    entries, results, _extra = contract
    assert results["unchanged"]["changed"] is False
    unchanged = by_tag(entries, "unchanged")
    assert argv_of(unchanged, "diff", "upgrade"), "the diff decides, as with helm-diff"
    assert not argv_of(unchanged, "upgrade")


def test_check_mode_runs_only_reads(contract):
    entries, results, _extra = contract
    check = by_tag(entries, "check")
    assert results["check"]["changed"] is True
    assert "upgrade -i" in results["check"]["command"]
    assert {e["argv"][0] for e in check} <= {"list", "show", "version", "get"}, check


def test_replace_runs_dependency_update_then_install(contract):
    entries, results, extra = contract
    replace = by_tag(entries, "replace")
    dep = argv_of(replace, "dependency", "update")
    assert dep and dep[0]["rc"] == 0 and not dep[0]["canned"]
    assert dep[0]["stdout"] == "Saving 1 charts\nDeleting outdated charts\n"
    umbrella = Path(extra["helm_contract_umbrella"])
    assert (umbrella / "Chart.lock").is_file()
    assert (umbrella / "charts" / "smshare-demo-0.1.0.tgz").is_file()
    installs = argv_of(replace, "install")
    assert installs[0]["argv"] == ["install", "--replace", "demo", extra["helm_contract_umbrella"]]
    assert results["replace"]["changed"] is True


def test_uninstall_argv(contract):
    entries, results, _extra = contract
    uninstall = by_tag(entries, "uninstall")
    assert argv_of(uninstall, "list")[0]["argv"][-1] == "--all"
    calls = argv_of(uninstall, "uninstall")
    assert calls[0]["argv"] == ["uninstall", "--keep-history", "--no-hooks", "--wait",
                                "--timeout", "1m", "demo"]
    assert results["uninstall"]["changed"] is True


def test_helm_info_reads_every_part(contract):
    entries, results, extra = contract
    info = by_tag(entries, "info")
    lists = argv_of(info, "list")
    assert lists[0]["argv"] == ["list", "--output=yaml", "--all", "--deployed", "--failed",
                                "--pending", "--superseded", "--uninstalled", "--uninstalling",
                                "--filter", "demo"]
    values = argv_of(info, "get", "values")[0]["argv"]
    assert values == ["get", "values", "--output=yaml", "demo", "-a"]
    for part in ("manifest", "notes", "hooks"):
        assert argv_of(info, "get", part)[0]["argv"] == ["get", part, "demo"]
    assert all(e["env"]["HELM_KUBECONTEXT"] == "lab-context" for e in info
               if e["argv"] != ["version"])
    status = results["info"]["status"]
    assert status["manifest"][0]["kind"] == "ConfigMap"
    assert status["hooks"][0]["metadata"]["name"] == "hook"
    assert status["notes"].startswith("NOTES:")
    ca = by_tag(entries, "info_ca")
    assert argv_of(ca, "list")[0]["env"]["HELM_KUBECAFILE"] == extra["helm_contract_values_file"]
    assert "status" not in results["info_ca"]


def test_repo_update_fails_like_helm_without_repositories(contract):
    entries, results, _extra = contract
    calls = argv_of(by_tag(entries, "repo_update"), "repo", "update")
    assert calls[0]["rc"] == 1
    assert "no repositories found" in calls[0]["stderr"]
    assert "no repositories found" in results["repo_update"]["msg"]


def test_post_renderer_is_refused_loudly(contract):
    entries, results, _extra = contract
    calls = argv_of(by_tag(entries, "post_renderer"), "upgrade")
    assert calls[0]["rc"] == 2
    assert '"--post-renderer"' in calls[0]["stderr"]
    assert "--post-renderer" in results["post_renderer"]["msg"]
