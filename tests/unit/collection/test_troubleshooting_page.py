# Apache-2.0
"""docs/troubleshooting.md is what scripts/troubleshooting_page.py writes from the
table the checks read (plugins/module_utils/troubleshooting.py): a row changed
without the page, or the page edited by hand, fails here."""
import subprocess
import sys
from pathlib import Path

from ansible_collections.smshare.kai.plugins.module_utils import troubleshooting

REPO = Path(__file__).resolve().parents[3]


def test_the_page_is_what_the_generator_writes():
    page = (REPO / "docs" / "troubleshooting.md").read_text(encoding="utf-8")
    assert page == troubleshooting.markdown(), "docs/troubleshooting.md is stale: run scripts/troubleshooting_page.py"


def test_the_generator_checks_the_page():
    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "troubleshooting_page.py"), "--check"],
                          text=True, capture_output=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_row_is_on_the_page():
    page = troubleshooting.markdown()
    for row in troubleshooting.ROWS:
        assert "| `%s` |" % row["id"] in page
