# Apache-2.0
"""The wiring of the smshare_* knobs into the roles' variables lives once, in
playbooks/vars/ (docs/DEVELOPING.md, "Conventions -> Variables"), and the
shipped inventories set knobs only. Every role variable of every play is
rendered on every host of the play, as that play sees it (wiring_render.py:
the inventory, the play's vars_files, the roles' defaults), for each shipped
inventory: nothing may be undefined, nothing a role requires may be left
unwired, and the role's argument validation must pass on the values."""
import fnmatch
import re

import pytest
import yaml

from wiring_cases import (BROKEN_KNOBS, FAKE_LAB_VARS, FAKE_LAB_VAULT, REPO, REQUIRED_KNOBS, SENTINEL, VARS, WIRING_FILES,
                          host_values, knobs_read_by, load, rendered, wiring)

SHIPPED = ["a100", "airgap", "lab"]
# Role variables the lab's all.yml sets itself (each wins over its wiring, as a
# site overrides one): its plumbing, which no site needs a knob for.
LAB_ROLE_VARIABLES = {
    "fork_images_registry_login_tool", "fork_images_build_poll_interval",
    "nvidia_driver_reboot_command", "nvidia_driver_reboot_boot_time_command",
    "preflight_node_checks", "preflight_become", "preflight_nri_socket_path", "preflight_containerd_binary",
    "preflight_gpu_stack_floors", "preflight_gpu_operator_minimum_version",
    "kai_pilot_image_pull_policy", "kai_pilot_pod_command", "kai_pilot_gang_command", "smoke_test_timeout",
}


def role_of(name):
    roles = [p.name for p in (REPO / "roles").iterdir() if name.startswith(p.name + "_")]
    return max(roles, key=len) if roles else None


def spec_options(role):
    return load(REPO / "roles" / role / "meta" / "argument_specs.yml")["argument_specs"]["main"]["options"]


def knobs_behind(name, wired, seen=()):
    """The knobs a wired variable reads, through the wired variables it reads."""
    text = str(wired[name])
    found = knobs_read_by(text)
    for other in wired:
        if other != name and other not in seen and re.search(r"(?<![a-z0-9_])%s(?![a-z0-9_])" % other, text):
            found |= knobs_behind(other, wired, seen + (name,))
    return found


def problems(case):
    found = []
    for play in rendered()[case]:
        for host, seen in play["hosts"].items():
            where = "%s (%s) on %s" % (play["playbook"], play["play"], host)
            found += ["%s: %s is undefined: %s" % (where, k, v) for k, v in seen["undefined"].items()]
            found += ["%s: %s is required by its role and nothing wires it" % (where, k)
                      for k in seen["missing_required"]]
            found += ["%s: the role's argument validation fails: %s" % (where, e) for e in seen["invalid"]]
    return found


@pytest.mark.parametrize("case", SHIPPED + ["a100-required"])
def test_every_role_variable_renders_on_every_host_of_every_play(case):
    assert rendered()[case], "no play rendered"
    assert problems(case) == []


@pytest.mark.parametrize("case", SHIPPED)
def test_every_host_of_every_role_play_is_rendered(case):
    for play in rendered()[case]:
        assert play["hosts"], "%s (%s) matched no host" % (play["playbook"], play["play"])


def test_every_wired_variable_is_a_role_option_and_wired_once():
    seen = {}
    for path in WIRING_FILES:
        for name in load(path):
            if name.startswith("_"):
                continue
            role = role_of(name)
            assert role and name in spec_options(role), "%s (%s) is no role's option" % (name, path.name)
            assert name not in seen, "%s is wired in %s and %s" % (name, seen[name], path.name)
            seen[name] = path.name


def test_every_wiring_yields_to_the_inventorys_own_value():
    """A role variable the inventory sets (here in host_vars) wins over its
    wiring, on every host of every play that renders it: the play's vars_files
    would otherwise beat the inventory and drop the user's value silently."""
    wired = wiring()
    reached = set()
    for play in rendered()["a100-overridden"]:
        for host, seen in play["hosts"].items():
            for name, value in seen["values"].items():
                if name in wired:
                    reached.add(name)
                    assert value == SENTINEL + name, "%s on %s (%s): %r" % (name, host, play["play"], value)
    # ... and every wired variable belongs to a role some play runs.
    assert sorted(set(wired) - reached) == []


def test_an_optional_knob_left_unset_leaves_the_roles_default():
    """With only the required knobs, a role variable wired from optional knobs
    alone is its role's default, or unset ('' or omit) where the role has none."""
    wired = wiring()
    for play in rendered()["a100-required"]:
        for host, seen in play["hosts"].items():
            for name in wired:
                role = role_of(name)
                if role not in play["roles"] or knobs_behind(name, wired) & set(REQUIRED_KNOBS):
                    continue
                where = "%s on %s (%s)" % (name, host, play["play"])
                if name in seen["defaults"]:
                    assert seen["values"].get(name) == seen["defaults"][name], where
                else:
                    assert name in seen["omitted"] or seen["values"].get(name, "") == "", where


def test_an_optional_knob_that_cannot_be_templated_fails_and_never_falls_back():
    """An optional knob is unset when the inventory does not name it: one it names
    with a broken value (here "{{ no_such_variable }}") is an error on every
    variable wired from it, not the role's default in silence."""
    wired = wiring()
    expected = {name for name in wired if knobs_behind(name, wired) & set(BROKEN_KNOBS)}
    failed = set()
    for play in rendered()["a100-broken"]:
        for host, seen in play["hosts"].items():
            for name, message in seen["undefined"].items():
                assert name in expected and "no_such_variable" in message, (name, message)
                failed.add(name)
            assert not set(seen["values"]) & expected, (play["play"], host, set(seen["values"]) & expected)
    assert {"smoke_test_image", "nvidia_driver_repo_mirror_url", "kai_scheduler_helm_binary", "fork_images_tag",
            "kai_scheduler_tag", "gpu_fractioning_tag"} <= failed


def test_each_play_loads_the_wiring_of_its_roles():
    main = {k for k in load(VARS / "wiring.yml") if not k.startswith("_")}
    for play in rendered()["a100"]:
        for role in play["roles"]:
            if any(k.startswith(role + "_") for k in main):
                assert "vars/wiring.yml" in play["vars_files"], (play["play"], role)


def test_every_vars_file_the_plays_name_is_in_playbooks_vars():
    for path in sorted((REPO / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(path.read_text()) or []:
            for entry in play.get("vars_files", []):
                assert "{{" not in entry and (REPO / "playbooks" / entry).is_file(), "%s names %s" % (path.name, entry)


def test_the_wiring_ships_in_the_collection():
    ignored = (load(REPO / "galaxy.yml").get("build_ignore") or [])
    for path in [REPO / "playbooks" / "vars"] + WIRING_FILES:
        relative = str(path.relative_to(REPO))
        parts = relative.split("/")
        for pattern in ignored:
            for i in range(1, len(parts) + 1):
                assert not fnmatch.fnmatch("/".join(parts[:i]), pattern), (relative, pattern)


# ------------------------------------------------------------------ inventories: knobs only
@pytest.mark.parametrize("inventory", SHIPPED)
def test_an_inventory_has_no_group_file_but_all(inventory):
    group_vars = REPO / "inventories" / inventory / "group_vars"
    files = sorted(p.name for p in group_vars.iterdir() if not (inventory == "lab" and p.name == "smshare_lab"))
    assert files == ["all.yml"]


@pytest.mark.parametrize("inventory", SHIPPED)
def test_an_inventory_sets_knobs_and_connections_only(inventory):
    knobs = load(REPO / "inventories" / inventory / "group_vars" / "all.yml")
    allowed = LAB_ROLE_VARIABLES if inventory == "lab" else set()
    assert sorted(k for k in knobs if not k.startswith("smshare_") and k not in allowed) == []
    assert sorted(allowed - set(knobs)) == [], "LAB_ROLE_VARIABLES names what the lab no longer sets"

    def walk(node):
        for name, value in ((node or {}).get("vars") or {}).items():
            assert name.startswith("ansible_"), "hosts.yml sets %s" % name
        for host in ((node or {}).get("hosts") or {}).values():
            assert all(k.startswith("ansible_") for k in (host or {})), "hosts.yml sets %s" % host
        for child in ((node or {}).get("children") or {}).values():
            walk(child)
    walk(load(REPO / "inventories" / inventory / "hosts.yml")["all"])


@pytest.mark.parametrize("inventory", SHIPPED)
def test_every_knob_an_inventory_sets_is_read(inventory):
    """By the wiring, a playbook, or another of the inventory's values (a knob
    nothing reads is a typo or a leftover)."""
    text = "".join(p.read_text() for p in sorted((REPO / "playbooks").rglob("*.yml")))
    inventory_text = (REPO / "inventories" / inventory / "group_vars" / "all.yml").read_text()
    for knob in load(REPO / "inventories" / inventory / "group_vars" / "all.yml"):
        if not knob.startswith("smshare_"):
            continue
        uses = len(re.findall(r"(?<![a-z0-9_])%s(?![a-z0-9_])" % knob, inventory_text))
        assert knob in knobs_read_by(text) or uses > 1, knob


def test_the_required_knobs_are_set_in_every_shipped_inventory():
    for inventory in SHIPPED:
        knobs = load(REPO / "inventories" / inventory / "group_vars" / "all.yml")
        assert sorted(set(REQUIRED_KNOBS) - set(knobs)) == [], inventory


# ------------------------------------------------------------------ the lab's generated source
def test_the_lab_stand_in_source_has_what_labctl_writes():
    """The lab case renders with FAKE_LAB_VARS in place of .lab/inventory: the
    names must be the writer's (lab/smshare_lab/inventory.py) and the node
    tier's facts those node_tier.facts() gives, so a renamed one fails here."""
    writer = (REPO / "lab" / "smshare_lab" / "inventory.py").read_text().replace("\\n", " ")
    written = set(re.findall(r"\b((?:smshare_lab|vault_smshare)_[a-z_]+)\b", writer))
    assert set(FAKE_LAB_VARS) | set(FAKE_LAB_VAULT) == written
    facts = (REPO / "lab" / "smshare_lab" / "node_tier.py").read_text().split("def facts():", 1)[1].split("\ndef ", 1)[0]
    assert set(FAKE_LAB_VARS["smshare_lab_node_tier"]) == set(re.findall(r'"([a-z_]+)": ', facts))


def test_the_lab_inventory_reads_only_what_labctl_writes():
    text = "".join(p.read_text() for p in sorted((REPO / "inventories" / "lab").rglob("*.yml")))
    own = set(load(REPO / "inventories" / "lab" / "group_vars" / "all.yml"))
    read = set(re.findall(r"\b((?:smshare_lab|vault_smshare)_[a-z_]+)\b", text)) - own
    assert sorted(read - set(FAKE_LAB_VARS) - set(FAKE_LAB_VAULT)) == []
    for key in re.findall(r"smshare_lab_node_tier\.([a-z_]+)", text):
        assert key in FAKE_LAB_VARS["smshare_lab_node_tier"], key


def test_the_lab_reaches_its_own_registry_mirror_and_charts():
    """Spot values: the lab's knobs reach the roles as its group files once set them."""
    controller = host_values("lab", "localhost")
    node = host_values("lab", "smshare-lab-gpu-01")
    registry = FAKE_LAB_VARS["smshare_lab_registry_address"]
    assert node["nvidia_driver_repo_mirror_url"] == FAKE_LAB_VARS["smshare_lab_standin_apt_url"]
    assert node["nvidia_driver_reboot_command"] == "systemd-run --on-active=1 --timer-property=AccuracySec=100ms systemctl reboot --no-wall"
    assert node["preflight_node_checks"] == ["driver"] and controller["preflight_node_checks"] == ["runtime"]
    assert controller["preflight_nri_socket_path"] == "/var/tmp/smshare-lab-test/node/root/var/run/nri/nri.sock"
    assert controller["kai_scheduler_fork_dir"] == "/var/tmp/smshare-lab-test/kai-forks/KAI-Scheduler"
    assert controller["gpu_fractioning_chart_cache_dir"] == "/var/tmp/smshare-lab-test/charts"
    assert controller["smoke_test_image"] == registry + "/nvidia/cuda:13.3.1-base-ubuntu24.04"
    assert controller["kai_pilot_chart_values"]["global"] == {
        "gpuSharing": True, "registry": registry + "/kai-fork/kai-scheduler", "tag": "smshare-44d1d0a-af0544e"}
    assert controller["gpu_operator_chart_repo_url"] == FAKE_LAB_VARS["smshare_lab_chart_repo_url"]
    assert node["driver_upgrade_smoke_test_options"] == {
        "runtime_class": "nvidia", "image": registry + "/nvidia/cuda:13.3.1-base-ubuntu24.04",
        "devicequery_image": registry + "/nvidia/k8s/cuda-sample:devicequery",
        "image_pull_secrets": ["smshare-smoke-registry"], "image_pull_policy": "Always"}
    build = host_values("lab", "localhost")
    assert build["fork_images_registry_login_tool"] == "buildah"
    assert sorted(build["fork_images_build_environment"]) == [
        "REGISTRY_AUTH_FILE", "STANDIN_BUILDAH_ROOT", "STANDIN_CERT_DIR", "STANDIN_MAKE_RECORD"]
