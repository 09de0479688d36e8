# Apache-2.0
"""galaxy.yml's dependencies are the collections the shipped roles, playbooks
and plugins use (no more, no fewer), each with a lower bound the tests ran: the
version the pinned ansible package ships."""
import json
import re
from pathlib import Path

import ansible
import yaml

REPO = Path(__file__).resolve().parents[3]
DEPENDENCIES = yaml.safe_load((REPO / "galaxy.yml").read_text())["dependencies"]
SHIPPED = [p for d in ("roles", "playbooks", "plugins") for p in (REPO / d).rglob("*")
           if p.is_file() and p.suffix in (".yml", ".yaml", ".py", ".j2")]
FQCN = re.compile(r"\b([a-z0-9_]+\.[a-z0-9_]+)\.[a-z0-9_]+\b")


def used_collections():
    found = set()
    for path in SHIPPED:
        text = path.read_text(encoding="utf-8")
        for line in text.splitlines():
            if line.lstrip().startswith("#"):
                continue
            for name in FQCN.findall(line):
                if name in set(DEPENDENCIES) | {"ansible.posix", "ansible.netcommon", "community.crypto"}:
                    found.add(name)
    return found


def test_dependencies_are_what_the_code_uses():
    assert used_collections() == set(DEPENDENCIES)


def test_each_lower_bound_is_the_tested_version():
    bundled = Path(ansible.__file__).resolve().parents[1] / "ansible_collections"   # the ansible package's
    for name, spec in DEPENDENCIES.items():
        namespace, collection = name.split(".")
        manifest = json.loads((bundled / namespace / collection / "MANIFEST.json").read_text())
        assert spec == ">=%s" % manifest["collection_info"]["version"], (name, spec)
