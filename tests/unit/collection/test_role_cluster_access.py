"""Cluster access in the roles, read statically: each cluster role sets its kubeconfig and
context once, as module_defaults on a block around every entry file (tasks/main.yml and
each file a playbook runs with tasks_from), and no task names the cluster itself. A task
that did would bypass `<role>_kube_context`; an entry file without the block would reach
whatever cluster KUBECONFIG names."""
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
ROLES = REPO / "roles"
# kubernetes.core's action groups (its meta/runtime.yml); the others need naming one by one.
GROUPED = {"k8s", "k8s_exec", "k8s_info", "k8s_log", "k8s_scale", "k8s_service", "k8s_cp", "k8s_drain",
           "helm", "helm_info", "helm_repository"}
NO_CLUSTER = {"helm_registry_auth"}      # a registry login: its `host` is the registry
# The collection's own modules that talk to the API server: its action group `cluster`.
OURS = {"smshare.kai." + name for name in
        yaml.safe_load((REPO / "meta" / "runtime.yml").read_text())["action_groups"]["cluster"]}
ACCESS = {"kubeconfig", "context", "kube_context", "api_key", "host"}


def tasks_in(node):
    if isinstance(node, list):
        for item in node:
            yield from tasks_in(item)
    elif isinstance(node, dict):
        yield node
        for key in ("block", "rescue", "always"):
            yield from tasks_in(node.get(key) or [])


def cluster_modules(task):
    return [key for key in task if key.startswith("kubernetes.core.") or key in OURS]


def role_files(role):
    return {path: yaml.safe_load(path.read_text()) or [] for path in sorted((ROLES / role / "tasks").glob("*.yml"))}


def _includes(node):
    """Every include_role/import_role argument mapping in a loaded YAML tree."""
    if isinstance(node, list):
        for item in node:
            yield from _includes(item)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key.split(".")[-1] in ("include_role", "import_role") and isinstance(value, dict):
                yield value
            else:
                yield from _includes(value)


def entry_files():
    """(role, task file) for every role's main.yml and each tasks_from that a playbook, a
    Molecule scenario, a test playbook or another role enters a role by."""
    entries = {(path.parts[-3], "main.yml") for path in ROLES.glob("*/tasks/main.yml")}
    sources = [REPO / "site.yml"] + [p for d in ("playbooks", "molecule", "tests", "roles")
                                     for p in (REPO / d).glob("**/*.yml")]
    for path in sources:
        try:
            tree = yaml.safe_load(path.read_text())
        except yaml.YAMLError:
            continue
        for include in _includes(tree):
            name, tasks_from = str(include.get("name", "")), include.get("tasks_from")
            if name.startswith("smshare.kai.") and isinstance(tasks_from, str) and "{" not in tasks_from:
                entries.add((name.rsplit(".", maxsplit=1)[-1], tasks_from if tasks_from.endswith(".yml") else tasks_from + ".yml"))
    return sorted(entries)


def reaches_the_cluster(tree):
    """The file runs a cluster module, or cluster_common's shared cluster steps."""
    return (any(cluster_modules(t) for t in tasks_in(tree))
            or any(str(i.get("name")) == "smshare.kai.cluster_common" for i in _includes(tree)))


CLUSTER_ROLES = sorted({path.parts[-3] for path in ROLES.glob("*/tasks/*.yml")
                        if reaches_the_cluster(yaml.safe_load(path.read_text()) or [])})


def test_the_cluster_roles_are_the_ones_expected():
    assert CLUSTER_ROLES == ["admission_policy", "cluster_common", "driver_upgrade", "gpu_fractioning", "gpu_operator", "kai_pilot",
                             "kai_scheduler", "preflight", "queues", "smoke_test", "uninstall"]


@pytest.mark.parametrize("role", CLUSTER_ROLES)
def test_no_task_names_the_cluster(role):
    named = [f"{path.name}: {task.get('name')} ({module})"
             for path, tree in role_files(role).items() for task in tasks_in(tree)
             for module in cluster_modules(task)
             if module.split(".")[-1] not in NO_CLUSTER and isinstance(task[module], dict)
             and ACCESS & set(task[module])]
    assert not named, f"set access in the entry file's module_defaults, not per task: {named}"


# cluster_common's files are entered by the cluster roles, under those roles' blocks
@pytest.mark.parametrize("role,entry", [(r, e) for r, e in entry_files() if r in CLUSTER_ROLES and r != "cluster_common"])
def test_every_entry_file_sets_the_roles_access_once(role, entry):
    tree = yaml.safe_load((ROLES / role / "tasks" / entry).read_text())
    assert len(tree) == 1 and "block" in tree[0], f"{entry}: one block holding the whole file"
    defaults = tree[0].get("module_defaults") or {}
    wanted = {"kubeconfig": f"{{{{ {role}_kubeconfig | default(omit, true) }}}}",
              "context": f"{{{{ {role}_kube_context | default(omit, true) }}}}"}
    used = {m.split(".")[-1] for tree in role_files(role).values() for t in tasks_in(tree) for m in cluster_modules(t)
            if m.startswith("kubernetes.core.")}
    if role in ("kai_scheduler", "gpu_fractioning"):
        used |= {m.split(".")[-1] for tree in role_files("cluster_common").values() for t in tasks_in(tree)
                 for m in cluster_modules(t) if m.startswith("kubernetes.core.")}
    keys = {"group/kubernetes.core.k8s", "group/kubernetes.core.helm", "group/smshare.kai.cluster"}
    keys |= {f"kubernetes.core.{m}" for m in used - GROUPED - NO_CLUSTER}
    assert set(defaults) == keys, f"{entry}: module_defaults for {sorted(keys)}"
    for key in keys:
        assert defaults[key] == wanted, f"{entry}: {key} takes {role}_kubeconfig and {role}_kube_context"


@pytest.mark.parametrize("role", [r for r in CLUSTER_ROLES if r != "cluster_common"])
def test_every_cluster_role_takes_kubeconfig_and_kube_context(role):
    spec = yaml.safe_load((ROLES / role / "meta" / "argument_specs.yml").read_text())["argument_specs"]
    options = spec["main"]["options"]
    assert f"{role}_kubeconfig" in options and f"{role}_kube_context" in options
