"""The docs site `make docs` builds (scripts/docs.sh: antsibull-docs + Sphinx,
warnings are errors), built here without a network where this machine can make
a network namespace: a page for every module, filter and test plugin and every
role with an argument spec, and the pages say what the sources say. Runs in
the test command's `other` stream (no lab)."""
import html
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
PLUGINS = REPO / "plugins"

pytestmark = pytest.mark.slow


def offline():
    """`unshare -n` (a network namespace with only loopback) where it works here."""
    try:
        ok = subprocess.run(["unshare", "-n", "true"], capture_output=True, check=False).returncode == 0
    except FileNotFoundError:
        ok = False
    return ["unshare", "-n"] if ok else []


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    dest = tmp_path_factory.mktemp("docs") / "site"
    proc = subprocess.run(offline() + ["bash", str(REPO / "scripts" / "docs.sh")], cwd=REPO,
                          env={**os.environ, "SMSHARE_DOCS_DIR": str(dest)},
                          text=True, capture_output=True, check=False, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return dest / "build" / "html" / "collections" / "smshare" / "kai"


def expected_pages():
    names = [p.stem + "_module" for p in (PLUGINS / "modules").glob("*.py") if p.stem != "__init__"]
    for kind, folder in (("filter", "filter"), ("test", "test")):
        for doc in (PLUGINS / folder).glob("*.yml"):
            names.append(yaml.safe_load(doc.read_text())["DOCUMENTATION"]["name"] + "_" + kind)
    names += [r.name + "_role" for r in (REPO / "roles").iterdir() if (r / "meta" / "argument_specs.yml").is_file()]
    return sorted(names)


def text(page):
    """The page's words without markup."""
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", page.read_text(encoding="utf-8"))))


def test_every_plugin_and_role_has_a_page(site):
    wanted = expected_pages()
    assert {"gpu_info_module", "preflight_role", "redact_url_filter", "safe_text_test"} <= set(wanted)
    missing = [n for n in wanted if not (site / (n + ".html")).is_file()]
    assert not missing, missing


@pytest.mark.parametrize("page, words", [
    ("gpu_info_module", ["smshare.kai.gpu_info module", "Parameters", "Return Values"]),
    ("redact_url_filter", ["smshare.kai.redact_url filter"]),
    ("safe_text_test", ["smshare.kai.safe_text test"]),
    # a templated default is shown as the template, in the option's description
    ("preflight_role", ["smshare.kai.preflight role", "preflight_cluster_checks",
                        "Templated default, rendered when the role runs:",
                        "inventory_hostname in groups['k8s_controller']"]),
])
def test_pages_show_the_documentation(site, page, words):
    shown = text(site / (page + ".html"))
    for word in words:
        assert word in shown, "%s: %r not on the page" % (page, word)
