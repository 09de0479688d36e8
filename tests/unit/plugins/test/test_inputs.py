# Apache-2.0
"""The Jinja tests roles use apply the modules' rules."""
import pytest

from ansible_collections.smshare.kai.plugins.filter.redact_url import FilterModule
from ansible_collections.smshare.kai.plugins.test.inputs import TestModule as InputTests

TESTS = InputTests().tests()


@pytest.mark.parametrize("name,good,bad", [
    ("safe_text", ["shared", "-x"], ["", "a\nb", None, 3]),
    ("safe_argument", ["pull/1/head"], ["--upload-pack=x", "a\tb"]),
    ("absolute_path", ["/run/nvidia-mps", "/opt/"], ["run", "/a/../b", "", "/a\n"]),
    ("plain_url", ["https://mirror.example.com/cuda", "http://10.0.0.1:8080/"],
     ["https://u:p@h/", "ftp://h/", "h/x", "https://h/\n"]),
    ("url_with_credentials", ["https://u:p@h/", "https://t@h"], ["https://h/", "", None]),
    ("git_url", ["https://github.com/kai-scheduler/KAI-Scheduler.git", "ssh://git@github.com/a/b.git",
                 "git@github.com:a/b.git", "file:///srv/git/b.git", "/srv/git/b.git", "git://h/b"],
     ["https://ghp_token@github.com/a/b.git", "https://u:p@h/b", "ssh://u:p@h/b", "u:p@h:b", "-h:b",
      "ftp://h/b", "file://h/b", "relative/path", "/a/../b", "https://h/b\n", "", None]),
])
def test_good_and_bad_values(name, good, bad):
    for value in good:
        assert TESTS[name](value) is True, value
    for value in bad:
        assert TESTS[name](value) is False, value


def test_redact_url_filter():
    redact = FilterModule().filters()["redact_url"]
    assert redact("https://u:p@h/x") == "https://<redacted>@h/x"
    assert redact("https://h/x") == "https://h/x"
