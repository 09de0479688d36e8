#!/usr/bin/env python3
"""Writes docs/troubleshooting.md from the table the checks read
(plugins/module_utils/troubleshooting.py, `markdown()`); `--check` exits 1 when
the page differs from what it would write. tests/unit/collection/
test_troubleshooting_page.py fails on a stale page."""
import importlib.util
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PAGE = REPO / "docs" / "troubleshooting.md"


def table():
    spec = importlib.util.spec_from_file_location(
        "troubleshooting", REPO / "plugins" / "module_utils" / "troubleshooting.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main(argv):
    page = table().markdown()
    if argv[1:] == ["--check"]:
        same = PAGE.is_file() and PAGE.read_text(encoding="utf-8") == page
        print("%s is %s" % (PAGE.relative_to(REPO), "current" if same else "stale: run scripts/troubleshooting_page.py"))
        return 0 if same else 1
    PAGE.write_text(page, encoding="utf-8")
    print("wrote %s" % PAGE.relative_to(REPO))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
