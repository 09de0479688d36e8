# Apache-2.0
import pytest

from ansible_collections.smshare.kai.plugins.module_utils.csv_output import parse_csv


def test_rows_follow_the_checked_header():
    out = "index, memory.total [MiB]\n0, 81920\n\n1, 15360\n"
    assert parse_csv(out, ["index", "memory.total [MiB]"]) == [["0", "81920"], ["1", "15360"]]


def test_header_only_is_no_rows_and_case_is_ignored():
    assert parse_csv("NAME, PID\n", ("name", "pid")) == []


@pytest.mark.parametrize("out, words", [
    ("", "no header"),
    ("   \n", "no header"),
    ("pid, name\n1, a\n", "expected the header"),           # reordered
    ("name\n", "expected the header"),                      # a column missing
    ("name, pid, uid\n", "expected the header"),            # a column added
    ("NAME  PID\nshared  42\n", "expected the header"),     # the table format, not CSV
    ("name, pid\nsha,red, 42\n", "3 cells instead of 2"),   # a value with a comma
    ("name, pid\nshared\n", "1 cells instead of 2"),
])
def test_anything_else_is_refused(out, words):
    with pytest.raises(ValueError) as caught:
        parse_csv(out, ("name", "pid"))
    assert words in str(caught.value)
