# Apache-2.0
"""registry_image_info run in-process against the fake registry of the module_utils tests."""
import json
import os
import sys

import pytest

from ansible.module_utils import basic

from ansible_collections.smshare.kai.plugins.module_utils import registry as reg
from ansible_collections.smshare.kai.plugins.modules import registry_image_info

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "module_utils"))
from test_registry import HOST, PASSWORD, USER, FakeRegistry, index, single  # noqa: E402
from module_runner import run_module  # noqa: E402


def run(monkeypatch, fake, args):
    monkeypatch.setattr(reg, "open_url", fake)
    return run_module(monkeypatch, registry_image_info.main, args)


def registry_with_images():
    cfg = "sha256:" + "c" * 64
    return FakeRegistry(manifests={
        ("kai/binder", "t1"): index(reg.OCI_INDEX, ["linux/amd64", "linux/arm64"]),
        ("kai/mpsd", "t1"): single(reg.DOCKER_MANIFEST, cfg),
    }, blobs={cfg: {"os": "linux", "architecture": "amd64"}})


def test_reports_each_image_and_lists_the_missing(monkeypatch):
    done = run(monkeypatch, registry_with_images(), {
        "images": [HOST + "/kai/binder:t1", HOST + "/kai/mpsd:t1", HOST + "/kai/gone:t1"],
        "platforms": ["linux/amd64", "linux/arm64"], "username": USER, "password": PASSWORD})
    assert not done.failed
    res = done.result
    assert res["changed"] is False and res["all_present"] is False
    assert [i["exists"] for i in res["images"]] == [True, True, False]
    assert res["missing"] == [HOST + "/kai/mpsd:t1 (lacks linux/arm64)",
                              HOST + "/kai/gone:t1 (not in the registry)"]


def test_all_present(monkeypatch):
    done = run(monkeypatch, registry_with_images(), {
        "images": [HOST + "/kai/binder:t1"], "platforms": ["linux/arm64"],
        "username": USER, "password": PASSWORD})
    assert done.result["all_present"] is True and done.result["missing"] == []


def test_auth_failure_fails_with_failure_status_and_image(monkeypatch):
    done = run(monkeypatch, registry_with_images(), {
        "images": [HOST + "/kai/binder:t1"], "username": USER, "password": "not-the-password"})
    assert done.failed
    assert done.result["failure"] == "auth" and done.result["status"] == 401 and "kind" not in done.result
    assert done.result["image"] == HOST + "/kai/binder:t1"
    assert "not-the-password" not in json.dumps(done.result)


def test_forbidden_fails_with_403(monkeypatch):
    fake = registry_with_images()
    fake.deny.add("kai/binder")
    done = run(monkeypatch, fake, {"images": [HOST + "/kai/binder:t1"], "username": USER, "password": PASSWORD})
    assert done.failed and done.result["status"] == 403 and done.result["failure"] == "denied"


def test_bad_reference_fails_before_any_request(monkeypatch):
    fake = registry_with_images()
    done = run(monkeypatch, fake, {"images": ["https://" + HOST + "/kai/binder:t1"]})
    assert done.failed and done.result["failure"] == "bad_input" and done.result["parameter"] == "images[0]"
    assert fake.requests == []


def test_password_is_declared_no_log():
    spec = {}

    class Capture(Exception):
        pass

    def fake_init(self, argument_spec, **kwargs):
        spec.update(argument_spec=argument_spec, kwargs=kwargs)
        raise Capture()

    original = basic.AnsibleModule.__init__
    basic.AnsibleModule.__init__ = fake_init
    try:
        with pytest.raises(Capture):
            registry_image_info.main()
    finally:
        basic.AnsibleModule.__init__ = original
    assert spec["argument_spec"]["password"]["no_log"] is True
    assert spec["kwargs"]["supports_check_mode"] is True
    assert ("username", "password") in spec["kwargs"]["required_together"]


GOOD = HOST + "/kai/binder:t1"
SECRET = "Sup3r-s3cret-pw"


def bad(args, parameter, *words, secret_free=SECRET):
    return pytest.param(args, parameter, words, secret_free, id="%s:%s" % (parameter, "/".join(words)[:40]))


# One row per refusal: the arguments, the parameter named, words of the message.
BAD_INPUT = [
    bad({"images": []}, "images", "must list at least 1 item"),
    bad({"images": [""]}, "images[0]", "must be set"),
    bad({"images": [GOOD, GOOD + "\n"]}, "images[1]", "control characters"),
    bad({"images": [GOOD + "\x00x"]}, "images[0]", "control characters"),
    bad({"images": ["alice:%s@%s/kai/binder:t1" % (SECRET, HOST)]}, "images[0]", "must not carry credentials",
        "<redacted>@", "username and password"),
    bad({"images": ["https://alice:%s@%s/kai/binder:t1" % (SECRET, HOST)]}, "images[0]",
        "must not carry credentials", "https://<redacted>@"),
    bad({"images": ["https://%s/kai/binder:t1" % HOST]}, "images[0]", "must be an image reference"),
    bad({"images": [HOST + "/Kai/Binder:t1"]}, "images[0]", "must be an image reference"),
    bad({"images": [HOST + "/kai/binder:-t1"]}, "images[0]", "must be an image reference"),
    bad({"images": [HOST + "/kai/binder@sha256:zz"]}, "images[0]", "must be an image reference"),
    bad({"images": [" " + GOOD]}, "images[0]", "must be an image reference"),
    bad({"images": [GOOD * 20]}, "images[0]", "at most 512"),
    bad({"images": [GOOD], "platforms": ["amd64"]}, "platforms[0]", "os/arch[/variant]"),
    bad({"images": [GOOD], "platforms": ["linux/amd64", "linux/arm64\n"]}, "platforms[1]", "control characters"),
    bad({"images": [GOOD], "platforms": ["linux/amd64$"]}, "platforms[0]", "os/arch[/variant]"),
    bad({"images": [GOOD], "timeout": 0}, "timeout", "between 1 and 3600"),
    bad({"images": [GOOD], "timeout": -5}, "timeout", "between 1 and 3600"),
    bad({"images": [GOOD], "timeout": 86400}, "timeout", "between 1 and 3600"),
    bad({"images": [GOOD], "ca_file": "ca.crt"}, "ca_file", "absolute path"),
    bad({"images": [GOOD], "ca_file": "/etc/../etc/ca.crt"}, "ca_file", "normalised"),
    bad({"images": [GOOD], "ca_file": "/nonexistent/ca.crt"}, "ca_file", "existing PEM file"),
    bad({"images": [GOOD], "username": "ali\nce", "password": SECRET}, "username", "control characters"),
    bad({"images": [GOOD], "username": USER, "password": SECRET + "\n"}, "password", "<redacted>",
        "control characters"),
]


@pytest.mark.parametrize("args, parameter, words, secret_free", BAD_INPUT)
def test_bad_input_is_refused_before_any_request(monkeypatch, args, parameter, words, secret_free):
    fake = registry_with_images()
    done = run(monkeypatch, fake, args)
    assert done.failed, done.result
    assert done.result["failure"] == "bad_input" and done.result["parameter"] == parameter, done.result
    for word in words:
        assert word in done.result["msg"], (word, done.result["msg"])
    assert "Nothing was changed" in done.result["msg"]
    assert secret_free not in json.dumps(done.result)
    assert fake.requests == []


def test_empty_password_reads_anonymously_and_never_sends_user_none(monkeypatch):
    fake = registry_with_images()
    warnings = []
    monkeypatch.setattr(basic.AnsibleModule, "warn", lambda self, msg: warnings.append(msg))
    done = run(monkeypatch, fake, {"images": [GOOD], "username": USER, "password": ""})
    assert done.failed and done.result["failure"] == "auth"
    assert "authentication required" in done.result["msg"]
    assert not any("Authorization" in r["headers"] for r in fake.requests)
    assert warnings == ["password is empty: reading anonymously, without credentials"]
