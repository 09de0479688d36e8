# Apache-2.0
"""Cross-file rules the collection keeps: each role's argument spec matches its
defaults, the inventories have the same groups, site.yml parses with the
production and the air-gapped inventory, and the air-gapped one moves every
download the README's table lists to a mirror."""
import os
import re
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

from wiring_cases import host_values, knobs_read_by, wiring

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "defaults" / "main.yml").is_file())


def load(path):
    with open(path, encoding="utf-8") as handle:
        return yaml.safe_load(handle) or {}


TEMPLATED_DEFAULT = "Templated default, rendered when the role runs: "


def templated_default(option):
    """The template of the description's templated-default paragraph, or None.
    A default that is a template is documented there, not as `default:`: docs
    tools read `default:` as a value of the option's type (antsibull-docs
    refuses a template for a bool) and would show the template as the value.
    It is plain text, not V(...): Ansible renders every description of a role's
    argument spec when the role runs, and V()'s escaped parenthesis is no Jinja."""
    paragraphs = option.get("description") or []
    for paragraph in [paragraphs] if isinstance(paragraphs, str) else paragraphs:
        if paragraph.startswith(TEMPLATED_DEFAULT):
            assert paragraph.endswith("."), "%r: the template, then a full stop" % paragraph
            return paragraph[len(TEMPLATED_DEFAULT):-1]
    return None


def texts(node):
    if isinstance(node, str):
        yield node
    elif isinstance(node, list):
        for item in node:
            yield from texts(item)
    elif isinstance(node, dict):
        for item in node.values():
            yield from texts(item)


@pytest.mark.parametrize("role", ROLES)
def test_every_argument_spec_text_is_a_template_ansible_can_render(role):
    """ansible-core renders a role's whole argument spec, descriptions included, when the role
    runs: a description that is no valid Jinja fails every play (a V(...) with an escaped
    parenthesis inside braces once stopped site.yml at its first role)."""
    spec = load(REPO / "roles" / role / "meta" / "argument_specs.yml")
    for text in texts(spec):
        try:
            jinja2.Environment().parse(text)
        except jinja2.TemplateSyntaxError as exc:
            raise AssertionError("%s: %r is no template Ansible can render: %s" % (role, text, exc))


@pytest.mark.parametrize("role", ROLES)
def test_argument_spec_matches_defaults(role):
    """Every default is specified with the same value (a template in the
    description's templated-default paragraph, any other value as `default:`);
    a specified option without a default is either required or
    optional-and-absent (reaches modules as default(omit))."""
    defaults = load(REPO / "roles" / role / "defaults" / "main.yml")
    options = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    assert sorted(defaults) == sorted(n for n, o in options.items()
                                      if "default" in o or templated_default(o) is not None), \
        "defaults/main.yml and the argument spec's defaults list different variables"
    for name, option in options.items():
        assert name.startswith(role + "_"), "%s is not prefixed with the role name" % name
        assert not (option.get("required") and "default" in option), "%s: required with a default" % name
        assert not ("default" in option and templated_default(option) is not None), \
            "%s: both a default and a templated default" % name
        assert "{{" not in str(option.get("default", "")), \
            "%s: a template as default: document it as %r V(...) in the description" % (name, TEMPLATED_DEFAULT)
    for name, value in defaults.items():
        spec = options[name]["default"] if "default" in options[name] else templated_default(options[name])
        assert spec == value, "%s: spec default %r, defaults/main.yml %r" % (name, spec, value)


@pytest.mark.parametrize("role", ROLES)
def test_absent_options_are_named_in_the_defaults_comments(role):
    """A newcomer reading defaults/main.yml sees every variable, set or not."""
    text = (REPO / "roles" / role / "defaults" / "main.yml").read_text(encoding="utf-8")
    options = load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]
    for name, option in options.items():
        if "default" not in option:
            assert name in text, "%s (no default) is not mentioned in defaults/main.yml" % name


def groups(inventory):
    found = set()

    def walk(node):
        for name, child in ((node or {}).get("children") or {}).items():
            found.add(name)
            walk(child)
    walk(load(REPO / "inventories" / inventory / "hosts.yml")["all"])
    return found


def test_inventories_share_the_production_groups():
    production = groups("a100")
    assert {"gpu_nodes", "build_hosts", "k8s_controller"} <= production
    assert production <= groups("lab")
    assert production == groups("airgap")


def test_group_vars_files_exist_in_every_inventory():
    def names(inventory):
        return {p.name for p in (REPO / "inventories" / inventory / "group_vars").glob("*.yml")}
    assert names("a100") == names("lab") == names("airgap")


def _env():
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"))
    env.pop("ANSIBLE_VAULT_PASSWORD_FILE", None)
    return env


@pytest.mark.parametrize("inventory", ["a100", "airgap"])
def test_site_and_audit_parse_with_the_inventory(inventory):
    for play in ("site.yml", "playbooks/audit.yml"):
        proc = subprocess.run(["ansible-playbook", play, "-i", "inventories/" + inventory, "--syntax-check"],
                              cwd=REPO, env=_env(), capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------- air-gapped sites
# Hosts a site without internet cannot reach; a rendered download location must name none.
OUTSIDE = ("github.com", "ghcr.io", "nvcr.io", "docker.io", "developer.download.nvidia.com",
           "helm.ngc.nvidia.com", "proxy.golang.org", "quay.io", "registry.k8s.io")


def airgap_table_knobs():
    """The knob column of README.md's "Air-gapped sites" table: the first `name` of each row."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Air-gapped sites", 1)[1].split("\n## ", 1)[0]
    knobs = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and cells[0] not in ("what", "---"):
            knobs += [k for k in re.findall(r"`([a-z_*]+)`", cells[2]) if not k.startswith("_")]
    return knobs


def rendered(inventory, host, names):
    """The values of these role variables for one host of the inventory, as the plays
    running their roles see them (the collection's wiring included: wiring_cases.py)."""
    values = host_values(inventory, host)
    return {name: values[name] for name in names}


def locations(value):
    """URL hosts and image registries in a rendered value (strings, lists, dicts)."""
    if isinstance(value, dict):
        return [h for v in value.values() for h in locations(v)]
    if isinstance(value, list):
        return [h for v in value for h in locations(v)]
    if not isinstance(value, str) or not value:
        return []
    found = re.findall(r"[a-z]+://([^/:\s]+)", value)
    if not found and not value.startswith("/") and " " not in value:
        first = value.split("/", 1)[0]
        # An image reference: its registry, or Docker Hub when the first part is not a host.
        found = [first if "/" in value and ("." in first or ":" in first) else "docker.io"]
    return found


def test_the_readme_table_lists_the_knobs_the_airgap_inventory_sets():
    """Each location the table lists is moved by the airgap inventory: the knob is set
    there, or it is a role variable the collection wires (playbooks/vars/) from a knob
    the airgap inventory sets."""
    knobs = airgap_table_knobs()
    assert "smshare_cuda_repo_mirror_url" in knobs and "smshare_pilot_chart_ref" in knobs, knobs
    text = "".join(p.read_text(encoding="utf-8") for p in (REPO / "inventories" / "airgap").rglob("*.yml"))
    airgap = set(yaml.safe_load((REPO / "inventories" / "airgap" / "group_vars" / "all.yml").read_text()))
    wired = wiring()
    # A mirror's login is named in a comment there (vaulted, per site), not set.
    not_set = {"smshare_smoke_test_registry_username"}
    for knob in knobs:
        if knob in not_set:
            continue
        set_there = re.search(r"(^|[^a-z_])%s:" % re.escape(knob), text, re.M)
        assert set_there or knobs_read_by(wired.get(knob, "")) & airgap, knob


@pytest.mark.parametrize("host,group", [("a100-hgx-01", "gpu_nodes"), ("build-01", "build_hosts"),
                                        ("localhost", "k8s_controller")])
def test_the_airgap_inventory_reaches_no_outside_location(host, group):
    knobs = {
        "gpu_nodes": ["nvidia_driver_repo_mirror_url", "nvidia_driver_keyring_deb"],
        "build_hosts": ["fork_images_kai_scheduler_repo_url", "fork_images_gpu_fractioning_repo_url",
                        "fork_images_binfmt_image", "fork_images_base_images", "fork_images_build_environment"],
        "k8s_controller": ["kai_pilot_chart_ref", "kai_pilot_chart_values", "kai_pilot_pod_image",
                           "gpu_operator_chart_repo_url", "gpu_operator_driver_repository",
                           "kai_scheduler_registry", "gpu_fractioning_registry",
                           "smoke_test_image", "smoke_test_devicequery_image"],
    }[group]
    values = rendered("airgap", host, knobs)
    for name in knobs:
        value = values[name]
        if name == "fork_images_base_images":
            value = [item["mirror"] for item in value]  # the names are what the Dockerfiles say
        if name == "kai_pilot_chart_values":
            value = value["global"]["registry"]   # the rest are names, not locations
        if name == "fork_images_build_environment":
            value = [value["GOPROXY"], value["GOSUMDB"].split()[1]]
        if name == "nvidia_driver_keyring_deb":
            assert value.startswith("/") and value.endswith(".deb"), value
            continue
        hosts = locations(value)
        assert hosts, (name, value)
        for found in hosts:
            assert found.endswith(".corp.internal") and found not in OUTSIDE, (name, value)


def test_the_production_inventory_does_reach_outside():
    """The check above can fail: inventories/a100 names GitHub and ghcr.io."""
    assert locations(rendered("a100", "build-01", ["fork_images_kai_scheduler_repo_url"])
                     ["fork_images_kai_scheduler_repo_url"]) == ["github.com"]
    assert locations(rendered("a100", "localhost", ["kai_pilot_chart_ref"])["kai_pilot_chart_ref"]) == ["ghcr.io"]
    assert locations("nvidia/cuda:13.0.2-base-ubi8") == ["docker.io"]
