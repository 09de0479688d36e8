# Apache-2.0
"""The shared input rules: every rule refuses its bad values with a message
naming the parameter, the value (redacted when secret), the rule and an example."""
import pytest

from ansible_collections.smshare.kai.plugins.module_utils import validate
from ansible_collections.smshare.kai.plugins.module_utils.validate import BadInput


def refused(check, *args, **kwargs):
    with pytest.raises(BadInput) as info:
        check(*args, **kwargs)
    exc = info.value
    assert exc.kind == "bad_input"
    assert exc.details()["failure"] == "bad_input"
    assert exc.msg.endswith("Nothing was changed.")
    return exc


@pytest.mark.parametrize("value", ["a\nb", "tail\n", "tab\there", "esc\x1b[0m", "nul\x00", "del\x7f", "c1\x85"])
def test_text_refuses_control_characters(value):
    exc = refused(validate.text, "server", value, example="shared")
    assert "control characters" in exc.msg
    assert exc.msg.startswith("server=")
    assert "\n" not in exc.msg and "\x1b" not in exc.msg
    assert "For example: shared." in exc.msg
    assert exc.details()["parameter"] == "server"


def test_text_pattern_is_a_full_match():
    pattern = r"[a-z]+"
    assert validate.text("name", "abc", example="abc", pattern=pattern) == "abc"
    exc = refused(validate.text, "name", "abc\n", example="abc", pattern=pattern)
    assert "control characters" in exc.msg
    exc = refused(validate.text, "name", "abc-def", example="abc", pattern=pattern, rule="must be lowercase letters")
    assert "must be lowercase letters" in exc.msg


def test_text_positional_refuses_leading_dash():
    exc = refused(validate.text, "ref", "--upload-pack=x", example="pull/1/head", positional=True)
    assert "start with '-'" in exc.msg
    assert validate.text("ref", "-x", example="x") == "-x"


@pytest.mark.parametrize("value", [None, ""])
def test_text_required(value):
    assert "must be set" in refused(validate.text, "tag", value, example="v1").msg
    assert validate.text("tag", value, example="v1", required=False) == value


def test_text_type_and_length():
    assert "string" in refused(validate.text, "tag", 5, example="v1").msg
    assert "at most 3" in refused(validate.text, "tag", "abcd", example="v1", max_length=3).msg


def test_secret_value_never_shown():
    exc = refused(validate.text, "password", "hunter2\n", example="a vault variable", secret=True)
    assert "hunter2" not in exc.msg
    assert "<redacted>" in exc.msg


@pytest.mark.parametrize("value,minimum,maximum,words", [
    (0, 1, None, "1 or more"), (-5, 1, None, "1 or more"), (101, 1, 100, "between 1 and 100"),
    (True, 1, None, "whole number"), ("5", 1, None, "whole number"), (7, None, 5, "5 or less")])
def test_integer_ranges(value, minimum, maximum, words):
    assert words in refused(validate.integer, "timeout", value, example="30", minimum=minimum, maximum=maximum).msg


@pytest.mark.parametrize("value", [0, 65536, -1])
def test_port_range(value):
    assert "between 1 and 65535" in refused(validate.port, "port", value).msg
    assert validate.port("port", 443) == 443


@pytest.mark.parametrize("value,words", [
    ("relative/dir", "absolute"), ("", "must be set"), ("/a/../etc", "normalised"),
    ("/a/./b", "normalised"), ("//srv", "normalised"), ("/a//b", "normalised"), ("/a\n", "control")])
def test_path_refusals(value, words):
    assert words in refused(validate.path, "pipe_directory", value, example="/run/nvidia-mps").msg


def test_path_accepts_and_strips_trailing_slash():
    assert validate.path("d", "/run/nvidia-mps/", example="/x") == "/run/nvidia-mps"
    assert validate.path("d", "/", example="/x") == "/"


@pytest.mark.parametrize("value, octal", [("0755", 0o755), ("755", 0o755), ("1777", 0o1777), ("0700", 0o700)])
def test_mode_accepts_octal_strings(value, octal):
    assert validate.mode("pipe_directory_mode", value) == octal


@pytest.mark.parametrize("value, words", [
    (493, "quoted octal string"), (755, "quoted octal string"), (True, "quoted octal string"),
    ("0855", "octal mode"), ("u=rwx", "octal mode"), ("075555", "octal mode"), ("75", "octal mode"),
    ("0755\n", "control characters"), ("", "must be set"),
])
def test_mode_refusals(value, words):
    exc = refused(validate.mode, "pipe_directory_mode", value)
    assert words in exc.msg and exc.details()["parameter"] == "pipe_directory_mode"


def test_items():
    assert "at least 1 item" in refused(validate.items, "images", [], example="[a]").msg
    assert "must be a list" in refused(validate.items, "images", "a", example="[a]").msg

    def each(name, item):
        validate.text(name, item, example="a")
    exc = refused(validate.items, "images", ["ok", "bad\n"], example="[a]", each=each)
    assert exc.details()["parameter"] == "images[1]"


@pytest.mark.parametrize("value,words", [
    ("ftp://mirror.example.com/x", "https or http URL"), ("https:///nohost", "host"),
    ("mirror.example.com/x", "https or http URL"), ("https://h:99999/", "must be a URL"),
    ("https://mirror.example.com/a b", "host")])
def test_url_refusals(value, words):
    assert words in refused(validate.url, "mirror_url", value, example="https://mirror.example.com/cuda").msg


def test_url_with_credentials_is_refused_and_redacted():
    exc = refused(validate.url, "repo_url", "https://bob:s3cret@git.example.com/kai.git",
                  example="https://git.example.com/kai.git", credentials_hint="a git credential helper")
    assert "s3cret" not in exc.msg and "bob" not in exc.msg
    assert "<redacted>@git.example.com" in exc.msg
    assert "a git credential helper" in exc.msg


def test_redact_url():
    assert validate.redact_url("https://u:p@h/x?y#z") == "https://<redacted>@h/x?y#z"
    assert validate.redact_url("https://token@h:5000/x") == "https://<redacted>@h:5000/x"
    assert validate.redact_url("https://h/x") == "https://h/x"
    assert validate.redact_url(None) is None
    assert validate.has_credentials("https://u:p@h/") and not validate.has_credentials("https://h/a@b")


@pytest.mark.parametrize("value, shown, words", [
    ("https://ghp_abc123@github.com/a/b.git", "https://<redacted>@github.com/a/b.git", "token@"),
    ("https://alice:s3cret@github.com/a/b.git", "https://<redacted>@github.com/a/b.git", "credential helper"),
    ("ssh://git:s3cret@github.com/a/b.git", "ssh://<redacted>@github.com/a/b.git", "credentials"),
    ("git:s3cret@github.com:a/b.git", "<redacted>@github.com:a/b.git", "password"),
])
def test_git_url_refuses_credentials_and_redacts_them(value, shown, words):
    with pytest.raises(validate.BadInput) as err:
        validate.git_url("repo_url", value, "https://github.com/a/b.git")
    assert shown in err.value.msg and words in err.value.msg
    assert "s3cret" not in err.value.msg and "ghp_abc123" not in err.value.msg
    assert err.value.details() == {"failure": "bad_input", "parameter": "repo_url"}


@pytest.mark.parametrize("value, redacted", [
    ("robot:tok3n@registry.example.com/team", "<redacted>@registry.example.com/team"),
    ("git@github.com:a/b.git", "<redacted>@github.com:a/b.git"),
    ("busybox@sha256:" + "a" * 64, "busybox@sha256:" + "a" * 64),
    ("registry.example.com/x@sha256:" + "b" * 64, "registry.example.com/x@sha256:" + "b" * 64),
    ("registry.example.com/team", "registry.example.com/team"),
])
def test_scheme_less_references_are_redacted_before_the_host(value, redacted):
    assert validate.redact_url(value) == redacted
    assert validate.has_credentials(value) is (redacted != value)


def test_writable_file(tmp_path):
    assert validate.writable_file("report", str(tmp_path / "new" / "deeper" / "r.xml"), "/x.xml") == \
        str(tmp_path / "new" / "deeper" / "r.xml")
    (tmp_path / "r.xml").write_text("old")
    assert validate.writable_file("report", str(tmp_path / "r.xml"), "/x.xml")
    for bad, words in ((str(tmp_path), "is a folder"), ("/dev/null", "not a regular file"),
                       (str(tmp_path / "r.xml" / "x.xml"), "is not a folder"), ("rel/x.xml", "absolute path")):
        with pytest.raises(validate.BadInput) as err:
            validate.writable_file("report", bad, "/x.xml")
        assert words in str(err.value), (bad, str(err.value))


class RefusingModule(object):
    """fail_json as an exception, like AnsibleModule's end of a run."""

    def __init__(self, params):
        self.params = params

    def fail_json(self, **result):
        raise SystemExit(result)


def test_refuse_bad_input_ends_the_run_with_the_rule_that_broke():
    def check(params):
        validate.integer("ttl", params["ttl"], example="3600", minimum=1)

    with pytest.raises(SystemExit) as ended:
        validate.refuse_bad_input(RefusingModule({"ttl": 0}), check)
    result = ended.value.args[0]
    assert result["failure"] == "bad_input" and result["parameter"] == "ttl"
    assert result["msg"].startswith("ttl=0") and result["msg"].endswith("Nothing was changed.")
    validate.refuse_bad_input(RefusingModule({"ttl": 5}), check)   # good input: the run goes on


def test_refuse_bad_input_passes_the_arguments_it_is_given():
    seen = []
    validate.refuse_bad_input(RefusingModule({}), lambda *args: seen.append(args), "a", 2)
    assert seen == [("a", 2)]
