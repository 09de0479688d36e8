"""The helm shim's formats, values merging, durations, environment and exit codes."""
import io
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[4]
sys.path.insert(0, str(REPO / "lab"))

from helm_shim import cli, commands  # noqa: E402
from helm_shim.argv import Refusal, UsageError, parse  # noqa: E402

DEMO_CHART = REPO / "tests" / "integration" / "helm" / "charts" / "smshare-demo"


def run(argv, environ=None):
    out, err = io.StringIO(), io.StringIO()
    rc = cli.main(argv, environ=environ or {}, stdout=out, stderr=err)
    return rc, out.getvalue(), err.getvalue()


def test_version_matches_kubernetes_core_pattern():
    rc, out, err = run(["version"])
    assert rc == 0 and not err
    assert out.startswith('version.BuildInfo{Version:"v4.2.3", ')


def test_plugin_list_names_the_built_in_diff():
    rc, out, _err = run(["plugin", "list"])
    lines = out.splitlines()
    assert rc == 0 and lines[0] == "NAME\tVERSION\tDESCRIPTION"
    name, version, _description = lines[1].split("\t")  # kubernetes.core splits on tabs, three fields
    assert name == "diff" and tuple(map(int, version.split("."))) >= (3, 9, 12)


BEFORE = """---
# Source: c/templates/a.yaml
apiVersion: v1
kind: ConfigMap
metadata:
  name: a
data:
  k: "1"
---
# Source: c/templates/b.yaml
apiVersion: v1
kind: Secret
metadata:
  name: b
  namespace: other
"""


def test_diff_lists_changed_added_and_removed_objects():
    after = BEFORE.replace('k: "1"', 'k: "2"').split("---\n# Source: c/templates/b.yaml",
                                                     maxsplit=1)[0] \
        + "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: s\n"
    text = commands.diff_objects(commands.manifest_objects(BEFORE, "ns"),
                                 commands.manifest_objects(after, "ns"))
    assert text == (
        "ns, a, ConfigMap (v1) has changed:\n"
        "  # Source: c/templates/a.yaml\n  apiVersion: v1\n  kind: ConfigMap\n"
        "  metadata:\n    name: a\n  data:\n-   k: \"1\"\n+   k: \"2\"\n"
        "ns, s, Service (v1) has been added:\n"
        "+ apiVersion: v1\n+ kind: Service\n+ metadata:\n+   name: s\n"
        "other, b, Secret (v1) has been removed:\n"
        "- # Source: c/templates/b.yaml\n- apiVersion: v1\n- kind: Secret\n"
        "- metadata:\n-   name: b\n-   namespace: other\n")
    same = commands.manifest_objects(BEFORE, "ns")
    assert commands.diff_objects(same, same) == ""


def test_show_chart_prints_chart_yaml():
    rc, out, _err = run(["--version=0.1.0", "show", "chart", str(DEMO_CHART)])
    assert rc == 0
    shown = yaml.safe_load(out)
    assert (shown["name"], shown["version"], shown["appVersion"]) == \
        ("smshare-demo", "0.1.0", "1.0.0")


def test_show_chart_of_missing_path_fails_like_helm():
    rc, out, err = run(["show", "chart", "/nonexistent/chart"])
    assert rc == 1 and not out and err.startswith("Error: ")


def test_refusal_exits_2_and_names_the_flag():
    rc, out, err = run(["list", "--max", "3"])
    assert rc == 2 and not out
    assert err.startswith('Error: helm (lab shim): unsupported flag "--max"')


def test_usage_error_exits_1_like_helm():
    rc, _out, err = run(["upgrade", "--timeout", "300", "a", "b"])
    assert rc == 1
    assert err == ('Error: invalid argument "300" for "--timeout" flag: '
                   'time: missing unit in duration "300"\n')


def test_repo_update_without_repositories(tmp_path):
    rc, _out, err = run(["repo", "update"], {"HELM_REPOSITORY_CONFIG": str(tmp_path / "none")})
    assert (rc, err) == (1, "Error: no repositories found. You must add one before updating\n")
    listed = tmp_path / "repositories.yaml"
    listed.write_text("repositories:\n- name: x\n  url: https://x\n")
    rc, _out, err = run(["repo", "update"], {"HELM_REPOSITORY_CONFIG": str(listed)})
    assert rc == 2 and "cannot update repository caches" in err


@pytest.mark.parametrize("environ,message", [
    ({"HELM_MAX_HISTORY": "3"}, "unsupported environment variable HELM_MAX_HISTORY"),
    ({"HELM_DRIVER": "sql"}, 'unsupported HELM_DRIVER "sql"'),
])
def test_unsupported_environment_is_refused(environ, message):
    rc, _out, err = run(["version"], environ)
    assert rc == 2 and message in err


def test_supported_environment_reaches_the_sdk_config(monkeypatch):
    seen = {}
    monkeypatch.setattr(commands.helm_python, "Config", lambda **kw: seen.update(kw))
    commands.open_config(parse(["list"]), {
        "KUBECONFIG": "/k", "HELM_NAMESPACE": "ns", "HELM_KUBECONTEXT": "ctx",
        "HELM_KUBETOKEN": "tok", "HELM_KUBEAPISERVER": "https://a", "HELM_KUBECAFILE": "/ca",
        "HELM_KUBEINSECURE_SKIP_TLS_VERIFY": "true", "HELM_DRIVER": "configmap"})
    assert seen == {"kubeconfig_path": "/k", "namespace": "ns", "kube_context": "ctx",
                    "kube_token": "tok", "kube_apiserver": "https://a", "kube_ca_file": "/ca",
                    "kube_insecure_skip_tls_verify": True, "storage_driver": "configmap"}


@pytest.mark.parametrize("duration,expected", [
    ("5m0s", 300), ("2m30s", 150), ("1h", 3600), ("1h1m1s", 3661), ("500ms", 1), ("0", 0),
    ("1.5m", 90),
])
def test_go_durations(duration, expected):
    assert commands.seconds(duration) == expected


@pytest.mark.parametrize("duration", ["300", "5 m", "5mins", ""])
def test_bad_durations(duration):
    with pytest.raises(UsageError, match="time: "):
        commands.seconds(duration)


def test_list_row_and_go_time():
    row = commands.list_row({"name": "r", "namespace": "n", "revision": 3, "status": "deployed",
                             "deployed_at": "2026-01-02T03:04:05Z", "chart_name": "c",
                             "chart_version": "1.0.0", "app_version": ""})
    assert row == {"name": "r", "namespace": "n", "revision": "3", "status": "deployed",
                   "updated": "2026-01-02 03:04:05 +0000 UTC", "chart": "c-1.0.0",
                   "app_version": ""}
    east = datetime(2026, 1, 2, 3, 4, 5, 250000, tzinfo=timezone(timedelta(hours=2)))
    assert commands.go_time(east) == "2026-01-02 03:04:05.25 +0200 +0200"
    assert commands.go_ansic(east) == "Fri Jan  2 03:04:05 2026"


def test_list_yaml_is_what_kubernetes_core_reads():
    text = commands.to_yaml([commands.list_row({"name": "r", "revision": 1})])
    assert yaml.safe_load(text)[0]["revision"] == "1"
    assert commands.to_yaml([]) == "[]\n"


class _Values:
    """Stands in for helm_python.Config in the values printer tests."""

    def __init__(self, values):
        self.values = values

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def get_values(self, name, all_values=False):
        return self.values


@pytest.mark.parametrize("stored,argv,expected", [
    (None, ["--output=yaml"], "null\n"),
    ({}, ["--output=yaml"], "null\n"),
    ({"b": 1, "a": {"c": "x"}}, ["--output=yaml"], "a:\n  c: x\nb: 1\n"),
    ({"a": 1}, [], "USER-SUPPLIED VALUES:\na: 1\n"),
    ({"a": 1}, ["-a"], "COMPUTED VALUES:\na: 1\n"),
    (None, ["-o", "json"], "null\n"),
])
def test_get_values_formats(monkeypatch, stored, argv, expected):
    monkeypatch.setattr(commands, "open_config", lambda parsed, environ: _Values(stored))
    rc, out, _err = run(["get", "values", "rel", *argv])
    assert (rc, out) == (0, expected)


def test_values_merge_like_helm(tmp_path):
    first = tmp_path / "1.yaml"
    first.write_text("a: {p: 1, q: 1}\nlist: [1, 2]\n")
    second = tmp_path / "2.yaml"
    second.write_text("a: {q: 2}\nlist: [3]\n")
    parsed = parse(["install", "r", "c", "-f", str(first), f"--values={second}",
                    "--set", "a.z=3,n=4", "--set-string", "n=5", "--set-json", 'j={"k":[1]}'])
    assert commands.collect_values(parsed) == {
        "a": {"p": 1, "q": 2, "z": 3}, "list": [3], "n": "5", "j": {"k": [1]}}


def test_values_file_errors(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("- not a map\n")
    with pytest.raises(commands.HelmFailure, match="failed to parse"):
        commands.collect_values(parse(["install", "r", "c", "-f", str(bad)]))
    with pytest.raises(commands.HelmFailure, match="no such file"):
        commands.collect_values(parse(["install", "r", "c", "-f", str(tmp_path / "none")]))
    with pytest.raises(Refusal, match="local files"):
        commands.collect_values(parse(["install", "r", "c", "-f", "https://x/v.yaml"]))


def test_deploy_options_map_flags_to_sdk_keys():
    upgrade = parse(["upgrade", "r", "c", "--force", "--atomic", "--no-hooks", "--wait",
                     "--timeout", "90s", "--history-max=4", "--dry-run=server",
                     "--reset-values", "--create-namespace"])
    assert commands._deploy_options(upgrade, "upgrade") == {  # pylint: disable=protected-access
        "force_replace": True, "rollback_on_failure": True, "disable_hooks": True,
        "wait": "watcher", "timeout_seconds": 90, "max_history": 4, "dry_run": "server",
        "reset_values": True}
    install = parse(["install", "r", "c", "--replace", "--create-namespace", "--dry-run=none"])
    assert commands._deploy_options(install, "install") == {  # pylint: disable=protected-access
        "replace": True, "create_namespace": True}
    with pytest.raises(UsageError, match="wait strategy"):
        commands._deploy_options(parse(["install", "r", "c", "--wait=forever"]), "install")  # pylint: disable=protected-access


def test_launcher_finds_the_venv_without_it_on_path():
    import subprocess  # pylint: disable=import-outside-toplevel
    result = subprocess.run([str(REPO / "lab" / "bin" / "helm"), "version"],
                            capture_output=True, text=True, check=False,
                            env={"PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith('version.BuildInfo{Version:"v4.2.3"')


def test_dependency_update_then_build(tmp_path):
    import shutil  # pylint: disable=import-outside-toplevel
    shutil.copytree(DEMO_CHART.parent, tmp_path / "charts")
    umbrella = tmp_path / "charts" / "smshare-umbrella"
    assert run(["dependency", "update", str(umbrella)]) == \
        (0, "Saving 1 charts\nDeleting outdated charts\n", "")
    archive = umbrella / "charts" / "smshare-demo-0.1.0.tgz"
    assert archive.is_file() and (umbrella / "Chart.lock").is_file()
    archive.unlink()
    rc, _out, err = run(["dependency", "build", str(umbrella)])
    assert rc == 0, err
    assert archive.is_file(), "dependency build restores charts/ from Chart.lock"
