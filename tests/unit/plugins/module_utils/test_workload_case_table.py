# Apache-2.0
"""The linter on the shared case table (workload_case_table.py): each object's findings, as
(rule, severity), are the table's verdict. The admission policy's CEL is held to the same
table in test_admission_policy.py."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import workload_rules as wr

from workload_case_table import CASES


def verdict(obj):
    return frozenset((f.rule, f.severity) for f in wr.lint([obj]))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_the_linter_gives_the_tables_verdict(case):
    assert verdict(case.obj) == case.expected


def test_the_table_names_each_case_once_and_reports_only_known_severities():
    assert len(set(c.id for c in CASES)) == len(CASES)
    for case in CASES:
        for rule, severity in case.expected:
            assert severity in wr.severities(rule), (case.id, rule, severity)


def test_the_table_is_what_admission_sees():
    """Objects as sent (no status, no uid: the linter reads those as live dumps), judged alone:
    no rule that needs more than the one object."""
    for case in CASES:
        assert "status" not in case.obj and "uid" not in case.obj.get("metadata", {}), case.id
        assert not set(rule for rule, _s in case.expected) & set(wr.NEEDS), case.id


def test_every_rule_that_judges_one_object_breaks_in_some_case_and_passes_in_another():
    broken = set(rule for case in CASES for rule, _s in case.expected)
    assert broken == set(wr.RULES) - set(wr.NEEDS)
    assert len([c for c in CASES if not c.expected]) >= 20


def test_the_severities_of_each_rule():
    assert wr.severities("fraction-runs-as-root") == ("error", "warning")
    assert wr.severities("queue-label-missing") == ("warning",)
    assert wr.severities("gpu-fraction-range") == ("error",)
    assert set(wr.NEEDS) <= set(wr.RULES) and set(wr.ALSO_WARNS) <= set(wr.RULES)
