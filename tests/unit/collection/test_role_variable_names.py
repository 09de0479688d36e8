# Apache-2.0
"""A name a role registers or sets as a fact outranks its vars/main.yml value for the
rest of the play: a role var of the same name silently becomes the task's result
(cluster_common's helm binary once became the install's result, breaking the next
release's commands). Every register and set_fact name differs from every role var."""
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[3]


def role_vars():
    found = {}
    for path in REPO.glob("roles/*/vars/main.yml"):
        for name in yaml.safe_load(path.read_text(encoding="utf-8")) or {}:
            found.setdefault(name, []).append(str(path.relative_to(REPO)))
    return found


def set_names():
    """(name, where) of each register and set_fact key in the roles' and playbooks' tasks."""
    found = []
    for path in list(REPO.glob("roles/*/tasks/*.yml")) + list(REPO.glob("roles/*/handlers/*.yml")):
        text = path.read_text(encoding="utf-8")
        where = str(path.relative_to(REPO))
        found += [(name, where) for name in re.findall(r"^\s*register:\s*([A-Za-z_][A-Za-z0-9_]*)\s*$", text, re.M)]
        lines = text.splitlines()
        for index, line in enumerate(lines):
            if line.strip() != "ansible.builtin.set_fact:":
                continue
            indent = None
            for key_line in lines[index + 1:]:
                if not key_line.strip():
                    continue
                depth = len(key_line) - len(key_line.lstrip(" "))
                indent = depth if indent is None else indent
                if depth < indent:
                    break
                key = re.match(r" {%d}([A-Za-z_][A-Za-z0-9_]*):" % indent, key_line)
                if key:
                    found.append((key.group(1), where))
    return found


def test_the_scan_finds_registers_and_facts():
    names = [name for name, _where in set_names()]
    assert "_cluster_common_helm" in names and "cluster_common_releases" in names


def test_no_register_or_fact_shadows_a_role_var():
    variables = role_vars()
    clashes = sorted({"%s (%s; role var in %s)" % (name, where, ", ".join(variables[name]))
                      for name, where in set_names() if name in variables})
    assert not clashes, "registered or set as facts, and also role vars: " + "; ".join(clashes)
