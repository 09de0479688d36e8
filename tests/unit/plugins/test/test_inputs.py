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
    ("registry_path", ["harbor.corp.internal/team/kai-fork", "127.0.0.1:5443/smshare", "localhost:5000"],
     ["harbor.corp.internal:99999/team", "h:x/a", "https://h/a", "u:p@h/a", "h/a/", "h/Team", "h/a:tag",
      "h/a\n", "", None, 5]),
    ("qualified_name", ["nvidia.com/cuda.driver-version.major", "gpu-fractioning.nvidia.com/Ready", "Ready",
                        "a" * 63, "a.b/" + "c" * 63],
     ["nvidia.com/cuda driver", "nvidia.com/", "/Ready", "Nvidia.com/x", "a" * 64, "-x", "x-", "a/b/c",
      "Ready\n", "", None]),
    ("image_reference", ["nvcr.io/nvidia/cuda:13.0.1-base-ubuntu24.04", "busybox:1.36",
                         "127.0.0.1:5443/a/b@sha256:" + "a" * 64],
     ["u:p@h/a:t", "https://h/a:t", "nvidia/cuda:13 --privileged", "h/A:t", "h:99999/a:t", "h/a:t\n", "", None]),
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
