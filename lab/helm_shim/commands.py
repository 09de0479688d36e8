"""The supported helm subcommands, run on helm-python-sdk (Helm v4's Go SDK in a library).

Output mimics helm's own: `list -o yaml|json|table`, `get values` printing
`null` when there are no user values, `version.BuildInfo{...}`, the
`plugin list` header, `Error: ...` on stderr with exit status 1.
"""
import difflib
import json
import math
import os
import re
import sys
from datetime import datetime, timezone

import yaml

import helm_python
from helm_python import _native

from .argv import Refusal, UsageError, parse_bool

# Environment helm reads that the shim passes on to the SDK's Config.
KUBE_ENV = {
    "HELM_KUBECONTEXT": "kube_context",
    "HELM_KUBETOKEN": "kube_token",
    "HELM_KUBEAPISERVER": "kube_apiserver",
    "HELM_KUBECAFILE": "kube_ca_file",
    "HELM_KUBETLS_SERVER_NAME": "kube_tls_server_name",
    "HELM_KUBEASUSER": "kube_as_user",
}
# Read elsewhere or harmless here (paths of caches, plugins, repository files).
OTHER_ENV = {
    "HELM_NAMESPACE", "HELM_KUBEINSECURE_SKIP_TLS_VERIFY", "HELM_KUBEASGROUPS",
    "HELM_DRIVER", "HELM_DEBUG", "HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME",
    "HELM_PLUGINS", "HELM_REGISTRY_CONFIG", "HELM_REPOSITORY_CACHE",
    "HELM_REPOSITORY_CONFIG", "HELM_BIN",
}
DRIVERS = {"secret": "secret", "secrets": "secret", "configmap": "configmap",
           "configmaps": "configmap", "memory": "memory", "": None}
WAIT_STRATEGIES = ("watcher", "legacy", "hookOnly")
DRY_RUN = {"client": "client", "true": "client", "server": "server",
           "none": None, "false": None}


class HelmFailure(Exception):
    """Failure reported the way helm reports it: `Error: ...`, exit status 1."""


# --- environment and cluster access -----------------------------------------

def check_environment(environ):
    """Refuse HELM_* variables that change helm's behaviour but are not implemented."""
    for key in sorted(environ):
        if key.startswith("HELM_") and environ[key] and key not in KUBE_ENV \
                and key not in OTHER_ENV:
            raise Refusal(f"unsupported environment variable {key}; the lab's helm shim "
                          f"reads {', '.join(sorted(set(KUBE_ENV) | OTHER_ENV))}")
    driver = environ.get("HELM_DRIVER", "")
    if driver not in DRIVERS:
        raise Refusal(f'unsupported HELM_DRIVER "{driver}"; the lab\'s helm shim supports '
                      "secret, configmap and memory")


def namespace_of(parsed, environ):
    return parsed.get("namespace") or environ.get("HELM_NAMESPACE") or "default"


def open_config(parsed, environ):
    """A helm_python.Config from helm's flags and environment."""
    options = {key: environ[var] for var, key in KUBE_ENV.items() if environ.get(var)}
    if parsed.get("kube_context"):
        options["kube_context"] = parsed.get("kube_context")
    kubeconfig = parsed.get("kubeconfig") or environ.get("KUBECONFIG", "")
    if kubeconfig and os.pathsep not in kubeconfig:
        options["kubeconfig_path"] = kubeconfig
    if environ.get("HELM_KUBEINSECURE_SKIP_TLS_VERIFY"):
        options["kube_insecure_skip_tls_verify"] = parse_bool(
            environ["HELM_KUBEINSECURE_SKIP_TLS_VERIFY"], "kube-insecure-skip-tls-verify")
    if environ.get("HELM_KUBEASGROUPS"):
        options["kube_as_groups"] = environ["HELM_KUBEASGROUPS"].split(",")
    options["storage_driver"] = DRIVERS[environ.get("HELM_DRIVER", "")]
    options["namespace"] = namespace_of(parsed, environ)
    return helm_python.Config(**{k: v for k, v in options.items() if v is not None})


# --- formats ----------------------------------------------------------------

def _when(release):
    text = release.get("deployed_at") or ""
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def go_time(moment):
    """Go's time.Time.String(): 2006-01-02 15:04:05.999999999 -0700 MST."""
    if moment is None:
        return ""
    fraction = f"{moment.microsecond:06d}".rstrip("0")
    offset = moment.strftime("%z") or "+0000"
    zone = "UTC" if offset == "+0000" else offset
    return moment.strftime("%Y-%m-%d %H:%M:%S") + (f".{fraction}" if fraction else "") \
        + f" {offset} {zone}"


def go_ansic(moment):
    """Go's time.ANSIC, which helm prints as LAST DEPLOYED."""
    if moment is None:
        return ""
    return moment.strftime("%a %b ") + f"{moment.day:2d}" + moment.strftime(" %H:%M:%S %Y")


def list_row(release):
    """One release as `helm list -o yaml|json` prints it."""
    return {
        "name": release.get("name", ""),
        "namespace": release.get("namespace", ""),
        "revision": str(release.get("revision", "")),
        "updated": go_time(_when(release)),
        "status": release.get("status", ""),
        "chart": f"{release.get('chart_name', '')}-{release.get('chart_version', '')}",
        "app_version": release.get("app_version", "") or "",
    }


def to_yaml(data):
    return yaml.safe_dump(data, default_flow_style=False, sort_keys=True)


def table(rows, headers):
    widths = [max(len(str(r[i])) for r in [headers] + rows) for i in range(len(headers))]
    lines = ["\t".join(str(c).ljust(w) for c, w in zip(row, widths)).rstrip()
             for row in [headers] + rows]
    return "\n".join(lines) + "\n"


def print_status(release, out):
    when = _when(release)
    out.write(f"NAME: {release.get('name', '')}\n"
              f"LAST DEPLOYED: {go_ansic(when.astimezone(timezone.utc)) if when else ''}\n"
              f"NAMESPACE: {release.get('namespace', '')}\n"
              f"STATUS: {release.get('status', '')}\n"
              f"REVISION: {release.get('revision', '')}\n"
              "TEST SUITE: None\n")
    if release.get("notes"):
        out.write(f"NOTES:\n{release['notes'].rstrip()}\n")


# --- values -----------------------------------------------------------------

def merge_maps(base, extra):
    """Helm's mergeMaps: nested maps merge, everything else is replaced."""
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = merge_maps(merged[key], value)
        else:
            merged[key] = value
    return merged


def read_values_file(path):
    if re.match(r"^[a-z][a-z0-9+.-]*://", path):
        raise Refusal(f'unsupported values file "{path}": the lab\'s helm shim reads local '
                      "files and - (stdin) only")
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as handle:
                text = handle.read()
    except OSError as exc:
        raise HelmFailure(f"open {path}: {exc.strerror.lower()}") from exc
    try:
        return helm_python.values_from_yaml(text)
    except helm_python.HelmValuesError as exc:
        raise HelmFailure(f"failed to parse {path}: {exc.detail}") from exc


def collect_values(parsed):
    """Values files, then --set-json, --set, --set-string, --set-file, as helm merges them."""
    values = {}
    for path in parsed.get("values", []):
        values = merge_maps(values, read_values_file(path))
    for flag, parser in (("set_json", helm_python.parse_set_json),
                         ("set", helm_python.parse_set_string),
                         ("set_string", helm_python.parse_set_string_values),
                         ("set_file", helm_python.parse_set_file)):
        for expression in parsed.get(flag, []):
            try:
                values = merge_maps(values, parser(expression))
            except helm_python.HelmValuesError as exc:
                raise HelmFailure(f"failed parsing --{flag.replace('_', '-')} data: "
                                  f"{exc.detail}") from exc
    return values


def seconds(duration, flag="timeout"):
    """A Go duration (5m0s, 300s, 1h30m, 500ms) in whole seconds, rounded up."""
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    if duration == "0":
        return 0
    parts = re.findall(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)", duration)
    if not parts or "".join(n + u for n, u in parts) != duration:
        detail = "missing unit in duration" if re.fullmatch(r"[\d.]+", duration) \
            else "invalid duration"
        raise UsageError(f'invalid argument "{duration}" for "--{flag}" flag: '
                         f'time: {detail} "{duration}"')
    return math.ceil(sum(float(n) * units[u] for n, u in parts))


# --- subcommands --------------------------------------------------------------

def cmd_version(parsed, environ, out):
    out.write(f'version.BuildInfo{{Version:"{helm_python.helm_sdk_version()}", '
              f'GitCommit:"", GitTreeState:"", '
              f'GoVersion:"helm-python-sdk {helm_python.__version__}"}}\n')


# `helm diff upgrade` is built in (helm-diff's output format, manifests only),
# listed as the plugin kubernetes.core looks for.
DIFF_PLUGIN = ("diff", "3.9.14", "Preview helm upgrade changes as a diff (built into the lab shim)")


def cmd_plugin_list(parsed, environ, out):
    out.write("NAME\tVERSION\tDESCRIPTION\n" + "\t".join(DIFF_PLUGIN) + "\n")


def _repositories_file(environ):
    if environ.get("HELM_REPOSITORY_CONFIG"):
        return environ["HELM_REPOSITORY_CONFIG"]
    base = environ.get("HELM_CONFIG_HOME") or os.path.join(
        environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "helm")
    return os.path.join(base, "repositories.yaml")


def registry_config(environ):
    """Where helm keeps registry logins: HELM_REGISTRY_CONFIG, else <config home>/registry/config.json."""
    if environ.get("HELM_REGISTRY_CONFIG"):
        return environ["HELM_REGISTRY_CONFIG"]
    base = environ.get("HELM_CONFIG_HOME") or os.path.join(
        environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "helm")
    return os.path.join(base, "registry", "config.json")


def registry_client(parsed, environ):
    """A registry client with helm's stored logins (the SDK's default client has none).
    The registry's CA comes from SSL_CERT_FILE, as for Go programs generally."""
    return helm_python.RegistryClient(credentials_file=registry_config(environ),
                                      plain_http=bool(parsed.get("plain_http")))


def is_oci(ref):
    return ref.startswith("oci://")


def cmd_registry_login(parsed, environ, out):
    host = parsed.args[0]
    if parsed.get("password_stdin"):
        if parsed.get("password"):
            raise UsageError("--password and --password-stdin are mutually exclusive")
        password = sys.stdin.read().rstrip("\n")
    else:
        password = parsed.get("password") or ""
    username = parsed.get("username") or ""
    if not username or not password:
        raise HelmFailure("username and password are required (the lab's helm shim cannot prompt)")
    os.makedirs(os.path.dirname(registry_config(environ)), exist_ok=True)
    with registry_client(parsed, environ) as client:
        try:
            client.login(host, username, password, insecure=bool(parsed.get("insecure")),
                         plain_http=bool(parsed.get("plain_http")))
        except helm_python.HelmError as exc:
            raise HelmFailure(str(exc.detail or exc).replace(password, "<redacted>")) from None
    out.write("Login Succeeded\n")


def cmd_registry_logout(parsed, environ, out):
    host = parsed.args[0]
    with registry_client(parsed, environ) as client:
        try:
            client.logout(host)
        except helm_python.HelmError as exc:
            raise HelmFailure(f"not logged in to {host}: {exc.detail}") from None
    out.write(f"Removing login credentials for {host}\n")


def cmd_repo_update(parsed, environ, out):
    path = _repositories_file(environ)
    repositories = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as handle:
            repositories = (yaml.safe_load(handle) or {}).get("repositories") or []
    if not repositories:
        raise HelmFailure("no repositories found. You must add one before updating")
    raise Refusal(f"{path} lists chart repositories; the lab's helm shim cannot update "
                  "repository caches (use local chart directories or archives)")


def _states(parsed):
    wanted = set()
    for state in ("deployed", "failed", "superseded", "uninstalled", "uninstalling"):
        if parsed.get(state):
            wanted.add(state)
    if parsed.get("pending"):
        wanted |= {"pending-install", "pending-upgrade", "pending-rollback"}
    return wanted


def cmd_list(parsed, environ, out):
    output = parsed.get("output") or "table"
    if output not in ("table", "yaml", "json"):
        raise UsageError(f'invalid argument "{output}" for "-o, --output" flag: '
                         "invalid format type")
    wanted = _states(parsed)
    with open_config(parsed, environ) as config:
        releases = config.list(all_states=bool(parsed.get("all") or wanted),
                               name_filter=parsed.get("filter"))
    if wanted and not parsed.get("all"):
        releases = [r for r in releases if r.get("status") in wanted]
    rows = [list_row(r) for r in releases]
    if output == "yaml":
        out.write(to_yaml(rows))
    elif output == "json":
        out.write(json.dumps(rows, separators=(",", ":")) + "\n")
    else:
        headers = ["NAME", "NAMESPACE", "REVISION", "UPDATED", "STATUS", "CHART", "APP VERSION"]
        keys = ["name", "namespace", "revision", "updated", "status", "chart", "app_version"]
        out.write(table([[row[k] for k in keys] for row in rows], headers))


def cmd_get_values(parsed, environ, out):
    output = parsed.get("output") or "table"
    if output not in ("table", "yaml", "json"):
        raise UsageError(f'invalid argument "{output}" for "-o, --output" flag: '
                         "invalid format type")
    with open_config(parsed, environ) as config:
        values = config.get_values(parsed.args[0], all_values=bool(parsed.get("all")))
    values = values or None
    if output == "json":
        out.write(json.dumps(values, separators=(",", ":")) + "\n")
        return
    text = "null\n" if values is None else to_yaml(values)
    if output == "table":
        out.write("COMPUTED VALUES:\n" if parsed.get("all") else "USER-SUPPLIED VALUES:\n")
    out.write(text)


def cmd_get_manifest(parsed, environ, out):
    with open_config(parsed, environ) as config:
        release = config.status(parsed.args[0])
    out.write((release.get("manifest") or "") + "\n")


def cmd_get_notes(parsed, environ, out):
    with open_config(parsed, environ) as config:
        release = config.status(parsed.args[0])
    if release.get("notes"):
        out.write(f"NOTES:\n{release['notes']}\n")


def cmd_get_hooks(parsed, environ, out):
    with open_config(parsed, environ) as config:
        everything = config.get_all(parsed.args[0])
    for hook in everything.get("hooks") or []:
        out.write(f"---\n# Source: {hook.get('path', '')}\n{hook.get('manifest', '')}\n")


def cmd_status(parsed, environ, out):
    with open_config(parsed, environ) as config:
        print_status(config.status(parsed.args[0]), out)


def _source_options(parsed):
    options = {"chart_version": parsed.get("version"), "chart_repo_url": parsed.get("repo"),
               "insecure_skip_tls_verify": parsed.get("insecure_skip_tls_verify"),
               "plain_http": parsed.get("plain_http")}
    return {k: v for k, v in options.items() if v}


def cmd_show_chart(parsed, environ, out):
    options = _source_options(parsed)
    options["format"] = "chart"
    # helm_python.show() sends `version`, which the library refuses: call it directly.
    if is_oci(parsed.args[0]):
        with registry_client(parsed, environ) as client:
            text = _native.call_string("helm_show", client._raw(), parsed.args[0], json.dumps(options))
    else:
        text = _native.call_string("helm_show", _native.HANDLE(0), parsed.args[0],
                                   json.dumps(options))
    out.write(text if text.endswith("\n") else text + "\n")


def cmd_dependency(parsed, environ, out):
    chart = parsed.args[0] if parsed.args else "."
    if parsed.command[1] == "update":
        helm_python.dependency_update(chart)
    else:
        helm_python.dependency_build(chart)
    declared = helm_python.dependency_list(chart)
    out.write(f"Saving {len(declared)} charts\nDeleting outdated charts\n")


def _deploy_options(parsed, action):
    """Options JSON for helm_install/helm_upgrade from the deploy flags."""
    options = _source_options(parsed)
    wait = parsed.get("wait")
    if wait is not None:
        if wait not in WAIT_STRATEGIES + ("true", "false"):
            raise UsageError(f'invalid argument "{wait}" for "--wait" flag: invalid wait '
                             f"strategy, use one of {', '.join(WAIT_STRATEGIES)}")
        options["wait"] = {"true": "watcher", "false": None}.get(wait, wait)
    if parsed.get("timeout") is not None:
        options["timeout_seconds"] = seconds(parsed.get("timeout"))
    dry_run = parsed.get("dry_run")
    if dry_run is not None:
        if dry_run not in DRY_RUN:
            raise UsageError(f'invalid dry-run value "{dry_run}": use client, server or none')
        options["dry_run"] = DRY_RUN[dry_run]
    simple = {"no_hooks": "disable_hooks", "skip_crds": "skip_crds",
              "skip_schema_validation": "skip_schema_validation",
              "take_ownership": "take_ownership", "atomic": "rollback_on_failure",
              "rollback_on_failure": "rollback_on_failure", "description": "description"}
    if action == "install":
        simple.update({"create_namespace": "create_namespace", "replace": "replace",
                       "dependency_update": "dependency_update"})
    else:
        simple.update({"reset_values": "reset_values", "reuse_values": "reuse_values",
                       "reset_then_reuse_values": "reset_then_reuse_values",
                       "force": "force_replace", "force_replace": "force_replace",
                       "cleanup_on_fail": "cleanup_on_fail"})
        if parsed.get("history_max") is not None:
            try:
                options["max_history"] = int(parsed.get("history_max"))
            except ValueError as exc:
                raise UsageError(f'invalid argument "{parsed.get("history_max")}" for '
                                 '"--history-max" flag: invalid syntax') from exc
    for flag, key in simple.items():
        if parsed.get(flag):
            options[key] = parsed.get(flag)
    return {k: v for k, v in options.items() if v is not None}


def _run_deploy(config, action, parsed, namespace, values, environ=None):
    name, chart = parsed.args
    helm_python.validate_release_name(name)
    options = _deploy_options(parsed, action)
    options["namespace"] = namespace
    client = None
    if is_oci(chart):
        # an oci:// chart is pulled with helm's stored registry logins
        client = registry_client(parsed, environ if environ is not None else os.environ)
        config.set_registry_client(client)
    try:
        payload = _native.call_string(
            "helm_" + action, config._raw(), _native.HANDLE(0), _native.HANDLE(0),
            chart, name, json.dumps(values), json.dumps(options))
    finally:
        if client is not None:
            config.set_registry_client(None)
            client.close()
    return json.loads(payload)


def _print_deployed(release, parsed, out):
    print_status(release, out)
    if parsed.get("dry_run") is not None and release.get("manifest"):
        out.write(f"MANIFEST:\n{release['manifest']}\n")


def _exists(config, name):
    try:
        return bool(config.history(name))
    except helm_python.HelmNotFoundError:
        return False


def cmd_install(parsed, environ, out):
    values = collect_values(parsed)
    namespace = namespace_of(parsed, environ)
    with open_config(parsed, environ) as config:
        _print_deployed(_run_deploy(config, "install", parsed, namespace, values, environ), parsed, out)


def cmd_upgrade(parsed, environ, out):
    values = collect_values(parsed)
    namespace = namespace_of(parsed, environ)
    name = parsed.args[0]
    with open_config(parsed, environ) as config:
        if parsed.get("install") and not _exists(config, name):
            out.write(f'Release "{name}" does not exist. Installing it now.\n')
            install_only = {k: v for k, v in parsed.flags.items()
                            if k not in ("reset_values", "reuse_values", "force", "force_replace",
                                         "reset_then_reuse_values", "cleanup_on_fail",
                                         "history_max")}
            parsed = type(parsed)(command=("install",), args=parsed.args, flags=install_only)
            release = _run_deploy(config, "install", parsed, namespace, values, environ)
        else:
            release = _run_deploy(config, "upgrade", parsed, namespace, values, environ)
            out.write(f'Release "{name}" has been upgraded. Happy Helming!\n')
    _print_deployed(release, parsed, out)


def manifest_objects(manifest, namespace):
    """Rendered manifest -> {header: text}, header as helm-diff prints it."""
    objects = {}
    for document in re.split(r"^---\s*$", manifest or "", flags=re.MULTILINE):
        body = yaml.safe_load(document)
        if not isinstance(body, dict) or "kind" not in body:
            continue
        meta = body.get("metadata") or {}
        header = (f"{meta.get('namespace', namespace)}, {meta.get('name', '')}, "
                  f"{body['kind']} ({body.get('apiVersion', '')})")
        objects[header] = document.strip("\n")
    return objects


def diff_objects(before, after):
    """helm-diff's listing: every added, removed or changed object, whole, +/- marked."""
    chunks = []
    for header in sorted(set(before) | set(after)):
        old, new = before.get(header), after.get(header)
        if old == new:
            continue
        if old is None:
            verb, lines = "has been added", ["+ " + line for line in new.splitlines()]
        elif new is None:
            verb, lines = "has been removed", ["- " + line for line in old.splitlines()]
        else:
            verb = "has changed"
            lines = [{"-": "- ", "+": "+ ", " ": "  "}[line[0]] + line[2:]
                     for line in difflib.ndiff(old.splitlines(), new.splitlines())
                     if line[0] in "-+ "]
        chunks.append(f"{header} {verb}:\n" + "\n".join(lines) + "\n")
    return "".join(chunks)


def cmd_diff_upgrade(parsed, environ, out):
    values = collect_values(parsed)
    namespace = namespace_of(parsed, environ)
    with open_config(parsed, environ) as config:
        current = config.status(parsed.args[0])
        preview = type(parsed)(command=("upgrade",), args=parsed.args,
                               flags=dict(parsed.flags, dry_run="client"))
        planned = _run_deploy(config, "upgrade", preview, namespace, values, environ)
    out.write(diff_objects(manifest_objects(current.get("manifest"), namespace),
                           manifest_objects(planned.get("manifest"), namespace)))


def cmd_uninstall(parsed, environ, out):
    name = parsed.args[0]
    options = {"keep_history": parsed.get("keep_history"),
               "disable_hooks": parsed.get("no_hooks"),
               "ignore_not_found": parsed.get("ignore_not_found")}
    if parsed.get("wait") is not None:
        wait = parsed.get("wait")
        options["wait"] = {"true": "watcher", "false": None}.get(wait, wait)
    if parsed.get("timeout") is not None:
        options["timeout_seconds"] = seconds(parsed.get("timeout"))
    options = {k: v for k, v in options.items() if v}
    with open_config(parsed, environ) as config:
        try:
            _native.call_string("helm_uninstall", config._raw(), name,
                                json.dumps(options) if options else None)
        except helm_python.HelmNotFoundError as exc:
            raise HelmFailure(f"uninstall: Release not loaded: {name}: release: not found") \
                from exc
    out.write(f'release "{name}" uninstalled\n')


HANDLERS = {
    ("version",): cmd_version,
    ("plugin", "list"): cmd_plugin_list,
    ("repo", "update"): cmd_repo_update,
    ("list",): cmd_list,
    ("get", "values"): cmd_get_values,
    ("get", "manifest"): cmd_get_manifest,
    ("get", "notes"): cmd_get_notes,
    ("get", "hooks"): cmd_get_hooks,
    ("status",): cmd_status,
    ("show", "chart"): cmd_show_chart,
    ("dependency", "update"): cmd_dependency,
    ("dependency", "build"): cmd_dependency,
    ("install",): cmd_install,
    ("upgrade",): cmd_upgrade,
    ("diff", "upgrade"): cmd_diff_upgrade,
    ("uninstall",): cmd_uninstall,
    ("registry", "login"): cmd_registry_login,
    ("registry", "logout"): cmd_registry_logout,
}
