# Apache-2.0
"""plugin_preload loads the collection's filters and tests in Ansible's main
process: every role that runs tasks of its own depends on it, and its one task
can never flush a handler."""
from pathlib import Path

import pytest
import yaml
from jinja2 import Environment

REPO = Path(__file__).resolve().parents[3]
ROLES = sorted(p.name for p in (REPO / "roles").iterdir() if (p / "meta" / "main.yml").is_file())
TASKS = yaml.safe_load((REPO / "roles" / "plugin_preload" / "tasks" / "main.yml").read_text())


@pytest.mark.parametrize("role", [r for r in ROLES if r not in ("plugin_preload", "cluster_common")])
def test_every_role_depends_on_the_preload(role):
    meta = yaml.safe_load((REPO / "roles" / role / "meta" / "main.yml").read_text())
    assert {"role": "smshare.kai.plugin_preload"} in (meta.get("dependencies") or []), \
        "%s: add `- role: smshare.kai.plugin_preload` to meta/main.yml dependencies" % role


def test_the_preload_is_one_meta_task_that_never_flushes():
    assert len(TASKS) == 1
    task = TASKS[0]
    assert task["ansible.builtin.meta"] == "flush_handlers"      # evaluated in the main process
    assert task["tags"] == ["always"]
    when = task["when"]
    # One filter and one test of this collection, each a file that exists.
    assert "| smshare.kai.redact_url" in when and "is smshare.kai.plain_url" in when
    assert (REPO / "plugins" / "filter" / "redact_url.py").is_file()
    assert (REPO / "plugins" / "test" / "plain_url.yml").is_file()
    # False whatever the plugins answer: `'' | redact_url` is '' (it only rewrites credentials).
    env = Environment()
    env.filters["smshare.kai.redact_url"] = lambda value: value
    env.tests["smshare.kai.plain_url"] = lambda value: True
    assert env.compile_expression(when)() is False
