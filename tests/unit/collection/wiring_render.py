# Apache-2.0
"""Test helper (tests/unit/collection/test_wiring.py), run as a script: every
role variable of every play of the given playbooks, rendered on every host of
the play as that play sees it (and each role default, rendered there) (the inventory, the play's vars_files with the
collection's wiring, the roles' defaults, -e), with Ansible's own variable
manager and templar. Connects to nothing and runs no task.

    python wiring_render.py '{"playbooks": [...], "wired": [...], "cases": {"<name>": [<source>, ...]}}'

prints JSON: for each case, one entry per play that runs a role, with each
host's rendered values of the role variables that are wired, set by the
inventory or required, the ones left omitted, the undefined ones (with
Ansible's message), the required ones nothing sets, the role argument
validation's errors on the rendered values, and the wired ones' defaults."""
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
# Groups the plays build at run time (group_by, the driver_upgrade plan): their
# hosts are GPU nodes.
RUNTIME_GROUPS = {"smshare_driver_host": "gpu_nodes", "smshare_driver_upgrade": "gpu_nodes",
                  "smshare_driver_gpu_operator": "gpu_nodes"}


def setup():
    from ansible import context
    from ansible.module_utils.common.collections import ImmutableDict
    context.CLIARGS = ImmutableDict(
        tags=(), skip_tags=(), listtags=False, listtasks=False, listhosts=False, syntax=False, check=False,
        diff=False, connection="local", forks=1, become=False, become_method="sudo", become_user=None,
        start_at_task=None, verbosity=0, extra_vars=(),
        inventory=(), subset=None, vault_ids=(), vault_password_files=())
    from ansible.plugins.loader import init_plugin_loader
    init_plugin_loader()


def spec(role):
    import yaml
    path = REPO / "roles" / role / "meta" / "argument_specs.yml"
    if not path.is_file():
        return {}
    return yaml.safe_load(path.read_text())["argument_specs"]["main"].get("options", {})


def short(name):
    """kai_scheduler for smshare.kai.kai_scheduler."""
    return name.rsplit(".", maxsplit=1)[-1]


def role_defaults(loader, role):
    path = REPO / "roles" / role / "defaults" / "main.yml"
    return (loader.load_from_file(str(path), trusted_as_template=True) or {}) if path.is_file() else {}


def play_roles(data):
    """Short names of the roles a play runs: its roles: and the tasks' include_role/import_role."""
    names = [short(r if isinstance(r, str) else r.get("role", r.get("name", ""))) for r in data.get("roles") or []]

    def walk(items):
        for item in items or []:
            for key in ("block", "rescue", "always"):
                walk(item.get(key))
            for key in ("include_role", "import_role", "ansible.builtin.include_role", "ansible.builtin.import_role"):
                name = str((item.get(key) or {}).get("name", ""))
                if name and "{" not in name:
                    names.append(short(name))
    for key in ("pre_tasks", "tasks", "post_tasks"):
        walk(data.get(key))
    return list(dict.fromkeys(names))


def to_json(value):
    from ansible.module_utils.common.text.converters import to_text
    if isinstance(value, dict):
        return {to_text(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return to_text(value)


def render_play(play, roles, inventory, loader, manager, wired):
    """Each host's view. The play was loaded without its roles: their defaults go under
    everything else, where a run has them."""
    from ansible.errors import AnsibleError, AnsibleValueOmittedError
    from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
    from ansible.template import Templar, trust_as_template
    from ansible.utils.vars import combine_vars

    templar = Templar(loader=loader, variables=manager.get_vars(play=play))
    pattern = templar.template(trust_as_template(play.hosts)) if isinstance(play.hosts, str) else play.hosts
    hosts = inventory.get_hosts(pattern)
    if not hosts and pattern in RUNTIME_GROUPS:
        hosts = inventory.get_hosts(RUNTIME_GROUPS[pattern])
    defaults = {}
    for role in roles:
        defaults = combine_vars(defaults, role_defaults(loader, role))
    result = {"play": play.get_name(), "roles": roles, "hosts": {}}
    for host in hosts:
        own = set(manager.get_vars(host=host, include_hostvars=False))   # the inventory's and -e's names
        variables = combine_vars(defaults, manager.get_vars(play=play, host=host))
        templar = Templar(loader=loader, variables=variables)
        seen = {"values": {}, "omitted": [], "undefined": {}, "missing_required": [], "invalid": [], "defaults": {}}
        for role in roles:
            options = spec(role)
            for name in set(options) & set(wired) & set(defaults):   # the role's default, rendered here
                try:
                    seen["defaults"][name] = to_json(templar.template(defaults[name]))
                except AnsibleError:
                    pass
            given = {}
            for name, option in options.items():
                if name not in variables:
                    if option.get("required"):
                        seen["missing_required"].append(name)
                    continue
                if name not in wired and name not in own and not option.get("required"):
                    continue   # a role default the inventory leaves alone: the role's business
                try:
                    value = templar.resolve_variable_expression(name)
                except AnsibleValueOmittedError:   # default(omit): left to the role, as a module arg
                    seen["omitted"].append(name)
                    continue
                except AnsibleError as exc:
                    seen["undefined"][name] = str(exc).splitlines()[0]
                    continue
                given[name] = value
                seen["values"][name] = to_json(value)
            checked = ArgumentSpecValidator({k: v for k, v in options.items() if k in given or v.get("required")}
                                            ).validate(given)
            seen["invalid"] += [str(e) for e in checked.error_messages]
        result["hosts"][host.name] = seen
    return result


def main():
    request = json.loads(sys.argv[1])
    setup()
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader
    from ansible.playbook.play import Play
    from ansible.vars.hostvars import HostVars
    from ansible.vars.manager import VariableManager

    loader = DataLoader()
    loader.set_basedir(str(REPO / "playbooks"))
    # The plays are read once, without loading their roles (what the test needs of a role
    # is its defaults and argument spec, read above).
    manager = VariableManager(loader=loader, inventory=InventoryManager(loader=loader, sources=[]))
    plays = []
    for playbook in request["playbooks"]:
        for data in loader.load_from_file(str(REPO / playbook), trusted_as_template=True) or []:
            roles = play_roles(data)
            if roles:
                play = Play.load({k: v for k, v in data.items() if k != "roles"}, variable_manager=manager, loader=loader)
                plays.append((playbook, play, roles))
    out = {}
    for case, sources in request["cases"].items():
        inventory = InventoryManager(loader=loader, sources=sources)
        manager = VariableManager(loader=loader, inventory=inventory)
        HostVars(inventory=inventory, variable_manager=manager, loader=loader)   # hostvars, as a run has it
        out[case] = []
        for playbook, play, roles in plays:
            rendered = render_play(play, roles, inventory, loader, manager, request["wired"])
            rendered["playbook"] = playbook
            rendered["vars_files"] = [str(v) for v in play.get_vars_files()]
            out[case].append(rendered)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
