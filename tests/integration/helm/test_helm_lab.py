"""The lab's helm shim against the lab's real apiserver.

kubernetes.core.helm/helm_info drive a chart with a CRD through install, re-run,
check mode, upgrade, helm_info, a refused flag and uninstall (playbooks/lab.yml
asserts each step); the shim's own subcommands are checked directly.
"""
import json
import os
import subprocess
import time

import pytest
import yaml

from helm_test_helpers import (PLAYBOOKS, RECORDER, SHIM, argv_of, copy_charts, read_log,
                               run_playbook)

pytestmark = [pytest.mark.lab, pytest.mark.second_lab]

NAMESPACE = "smshare-helm-test"
CLI_NAMESPACE = "smshare-helm-cli"
CRD = "gadgets.demo.smshare.test"


@pytest.fixture(scope="module")
def kubeconfig(lab):
    """The lab's admin kubeconfig (the session `lab` fixture brings the lab up)."""
    return str(lab.kubeconfig)


def _cleanup(kubeconfig):
    """Remove what these tests create: releases, namespaces, the chart's CRD."""
    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    from kubernetes.client.rest import ApiException  # pylint: disable=import-outside-toplevel
    for namespace in (NAMESPACE, CLI_NAMESPACE):
        for release in ("demo", "cli"):
            shim(kubeconfig, "uninstall", "--ignore-not-found", release, namespace=namespace)
    api = config.new_client_from_config(config_file=kubeconfig)
    core, crds = client.CoreV1Api(api), client.ApiextensionsV1Api(api)
    gone = []
    for namespace in (NAMESPACE, CLI_NAMESPACE):
        gone.append((core.read_namespace, namespace))
        try:
            core.delete_namespace(namespace)
        except ApiException as exc:
            assert exc.status == 404, exc
    gone.append((crds.read_custom_resource_definition, CRD))
    try:
        crds.delete_custom_resource_definition(CRD)
    except ApiException as exc:
        assert exc.status == 404, exc
    # namespaces and CRDs finish deleting asynchronously: wait, or a re-run would race them
    deadline = time.monotonic() + 120
    for read, name in gone:
        while True:
            try:
                read(name)
            except ApiException as exc:
                assert exc.status == 404, exc
                break
            assert time.monotonic() < deadline, f"{name} is still being deleted after 120 s"
            time.sleep(1)


def shim(kubeconfig, *argv, namespace=CLI_NAMESPACE, check=False):
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HELM_")}
    environ.update({"KUBECONFIG": kubeconfig, "HELM_NAMESPACE": namespace})
    result = subprocess.run([str(SHIM), *argv], env=environ, capture_output=True, text=True,
                            timeout=300, check=False)
    if check:
        assert result.returncode == 0, f"helm {' '.join(argv)}: {result.stderr}"
    return result


@pytest.fixture(scope="module")
def clean_lab(kubeconfig):
    _cleanup(kubeconfig)
    yield kubeconfig
    _cleanup(kubeconfig)


def test_kubernetes_core_lifecycle(clean_lab, tmp_path):
    charts = copy_charts(tmp_path)
    log = tmp_path / "recorded.jsonl"
    run_playbook(PLAYBOOKS / "lab.yml", {
        "helm_test_workdir": str(tmp_path),
        "helm_lab_binary": str(RECORDER),
        "helm_lab_bin_dir": str(SHIM.parent),
        "helm_lab_kubeconfig": clean_lab,
        "helm_lab_chart": str(charts / "smshare-demo"),
    }, env={"SMSHARE_HELM_RECORDER_LOG": str(log)})
    entries = read_log(log)
    failed = [e for e in entries if e["rc"] != 0]
    # the only failure: the post-renderer the shim refuses (in the diff that runs first)
    assert [(e["argv"][:2], e["rc"]) for e in failed] == [(["diff", "upgrade"], 2)], failed
    assert all(not e["canned"] for e in entries)
    installs = [e for e in argv_of(entries, "upgrade") if e["rc"] == 0]
    assert len(installs) == 2, "one install and one upgrade: re-runs and check mode deploy nothing"
    assert 'Installing it now' in installs[0]["stdout"]
    assert 'has been upgraded' in installs[1]["stdout"]


def test_cli_install_status_list_values_dry_run(clean_lab, tmp_path):
    chart = str(copy_charts(tmp_path) / "smshare-demo")
    kube = clean_lab
    installed = shim(kube, "install", "cli", chart, "--create-namespace", check=True)
    assert "STATUS: deployed" in installed.stdout and "REVISION: 1" in installed.stdout

    from kubernetes import client, config  # pylint: disable=import-outside-toplevel
    greeting = client.CoreV1Api(config.new_client_from_config(config_file=kube)) \
        .read_namespaced_config_map("cli-greeting", CLI_NAMESPACE)
    assert [(f.manager, f.operation) for f in greeting.metadata.managed_fields] == \
        [("helm", "Apply")], "helm v4 applies server-side as field manager helm"

    values = shim(kube, "get", "values", "--output=yaml", "cli", check=True)
    assert values.stdout == "null\n"
    listed = yaml.safe_load(shim(kube, "list", "--output=yaml", "--filter", "cli",
                                 check=True).stdout)
    assert [(r["name"], r["chart"], r["revision"], r["status"], r["app_version"])
            for r in listed] == [("cli", "smshare-demo-0.1.0", "1", "deployed", "1.0.0")]
    dry_install = shim(kube, "install", "cli-dry", chart, "--dry-run=server", check=True)
    assert "MANIFEST:" in dry_install.stdout and "kind: Gadget" in dry_install.stdout
    dry = shim(kube, "upgrade", "cli", chart, "--set", "greeting=dry", "--dry-run=server",
               check=True)
    assert 'greeting: "dry"' in dry.stdout and "MANIFEST:" in dry.stdout
    as_json = json.loads(shim(kube, "list", "-o", "json", "--all", check=True).stdout)
    assert [r["name"] for r in as_json] == ["cli"], "dry runs must not store releases"
    status = shim(kube, "status", "cli", check=True)
    assert "REVISION: 1" in status.stdout, "a server dry run must not make a revision"
    assert shim(kube, "get", "values", "-o", "yaml", "cli", check=True).stdout == "null\n"

    manifest = shim(kube, "get", "manifest", "cli", check=True).stdout
    assert "kind: Gadget" in manifest
    hooks = shim(kube, "get", "hooks", "cli", check=True).stdout
    assert hooks.startswith("---\n# Source: smshare-demo/templates/post-install-hook.yaml")
    # helm prints "NOTES:\n%s\n" and the rendered notes end with a newline of their own
    assert shim(kube, "get", "notes", "cli", check=True).stdout == "NOTES:\ncli says hello.\n\n"

    gone = shim(kube, "uninstall", "cli", check=True)
    assert gone.stdout == 'release "cli" uninstalled\n'
    again = shim(kube, "uninstall", "cli")
    assert again.returncode == 1 and "not found" in again.stderr
    missing = shim(kube, "get", "values", "cli")
    assert missing.returncode == 1 and missing.stderr.startswith("Error: ")
    assert yaml.safe_load(shim(kube, "list", "-o", "yaml", check=True).stdout) == []


def test_rejected_install_fails_and_is_listed_failed(clean_lab, tmp_path):
    chart = str(copy_charts(tmp_path) / "smshare-demo")
    bad = shim(clean_lab, "install", "cli", chart, "--create-namespace",
               "--set", "gadget.size=huge")
    assert bad.returncode == 1
    assert bad.stderr.startswith("Error: ") and 'Unsupported value: "huge"' in bad.stderr
    listed = yaml.safe_load(shim(clean_lab, "list", "-o", "yaml", check=True).stdout)
    assert [(r["name"], r["status"]) for r in listed] == [("cli", "failed")], \
        "helm lists failed releases by default"
    assert yaml.safe_load(shim(clean_lab, "list", "-o", "yaml", "--deployed",
                               check=True).stdout) == []
    shim(clean_lab, "uninstall", "cli", check=True)


def test_unsupported_flag_changes_nothing(clean_lab, tmp_path):
    chart = str(copy_charts(tmp_path) / "smshare-demo")
    refused = shim(clean_lab, "install", "cli", chart, "--generate-name")
    assert refused.returncode == 2 and '"--generate-name"' in refused.stderr
    assert yaml.safe_load(shim(clean_lab, "list", "-o", "yaml", "--all",
                               check=True).stdout) == []
