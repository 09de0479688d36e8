"""Rules for the Jinja in the roles' and playbooks' YAML, read statically.

1. Every boolean knob (argument_specs `type: bool`) is read through `| bool`:
`-e name=false` gives the string "false": argument_specs accepts it (it is a
valid boolean) but leaves the variable a string, so `not name` is false and
`when: name` stops with "Conditional result ... derived from value of type
'str'". A knob read raw in an expression therefore inverts or breaks the
role.
2. Every `match` pattern that anchors its end does so with `\\Z`: with `$`,
`v26.7.1\\n` (a value read from a file or a heredoc) passes a version check."""
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
# Keys whose whole value is a Jinja expression.
EXPRESSION_KEYS = {"when", "changed_when", "failed_when", "until", "that", "check_mode"}
STRING_LITERAL = re.compile(r"'[^']*'|\"[^\"]*\"")
JINJA = re.compile(r"\{\{(.*?)\}\}|\{%(.*?)%\}", re.S)


def flags(role_dir):
    spec = yaml.safe_load((role_dir / "meta" / "argument_specs.yml").read_text())
    return sorted({name for entry in spec["argument_specs"].values()
                   for name, opt in entry.get("options", {}).items() if opt.get("type") == "bool"})


def expressions(node, key=None):
    """The Jinja expressions in a loaded YAML tree: whole values of the
    conditional keys, the {{ }} / {% %} parts of every other string."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield from expressions(v, k)
    elif isinstance(node, list):
        for item in node:
            yield from expressions(item, key)
    elif isinstance(node, str):
        if key in EXPRESSION_KEYS:
            yield node
        else:
            for match in JINJA.finditer(node):
                yield match.group(1) or match.group(2)


def raw_reads(expression, names):
    code = STRING_LITERAL.sub("''", expression)
    return [n for n in names if re.search(r"\b%s\b(?!\s*\|\s*bool\b)" % re.escape(n), code)]


ROLES = sorted(p for p in (REPO / "roles").iterdir() if (p / "meta" / "argument_specs.yml").is_file())


@pytest.mark.parametrize("role_dir", ROLES, ids=lambda p: p.name)
def test_every_boolean_knob_is_read_through_bool(role_dir):
    names = flags(role_dir)
    found = []
    for path in sorted(role_dir.glob("**/*.yml")):
        if path.parts[-2] in ("defaults", "meta"):
            continue
        for expression in expressions(yaml.safe_load(path.read_text())):
            found += ["%s: %s in %r" % (path.relative_to(REPO), n, " ".join(expression.split())[:120])
                      for n in raw_reads(expression, names)]
    assert not found, "read these through `| bool` (-e name=false is the string 'false'):\n" + "\n".join(found)


@pytest.mark.parametrize("expression, expected", [
    ("not flag", ["flag"]),
    ("flag | bool", []),
    ("not (flag|bool) and x", []),
    ("'set flag=true' if x else ''", []),
    ("other_flag", []),
    ("flag_two", []),
])
def test_raw_reads(expression, expected):
    assert raw_reads(expression, ["flag"]) == expected


MATCH_PATTERN = re.compile(r"""(?:\bmatch\(|'match',\s*)'([^']*)'""")
YAML_FILES = sorted(p for d in ("roles", "playbooks") for p in (REPO / d).glob("**/*.yml"))


def match_patterns(expression):
    """The regular expressions of the match tests in an expression, as Ansible reads them: a
    string literal's backslashes stay as written (no Python escapes; plain Jinja would decode
    them, and warn on `\\Z`). test_ansible_keeps_backslashes_in_string_literals holds that."""
    return MATCH_PATTERN.findall(expression)


def ansible_template(text):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template
    return Templar(loader=DataLoader()).template(trust_as_template(text))


def test_ansible_keeps_backslashes_in_string_literals():
    """The roles write `match('...\\Z')` and `regex_replace(..., '\\1')` for what they
    mean, because ansible-core does not decode escapes in a Jinja string literal. An
    ansible-core that did would turn `\\1` into chr(1): this test says so first."""
    assert ansible_template("{{ 'a\\Zb' | length }}") == 4
    assert ansible_template("{{ 'a\\nb' | length }}") == 4
    assert ansible_template("{{ 'v1' is match('^v1\\Z') }}") is True
    assert ansible_template("{{ 'a.b' | regex_replace('^(.*)$', '<\\1>') }}") == "<a.b>"


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(REPO)))
def test_match_patterns_anchor_their_end_with_backslash_z(path):
    data = yaml.safe_load(path.read_text())
    bad = []
    for expression in expressions(data):
        for pattern in match_patterns(expression):
            re.compile(pattern)
            if pattern.endswith("$"):
                bad.append(pattern)
    assert not bad, "end these with \\Z, not $ ($ also matches before a final newline): %s" % bad


def test_backslash_z_refuses_a_final_newline():
    [pattern] = match_patterns("x is match('^v?[0-9]+\\.[0-9]+\\.[0-9]+\\Z')")
    assert re.match(pattern, "v26.7.1") and not re.match(pattern, "v26.7.1\n")
