# Apache-2.0
"""registry_image_info run in-process against the fake registry of the module_utils tests."""
import json
import os
import sys

import pytest

from ansible.module_utils import basic
from ansible.module_utils.testing import patch_module_args

from ansible_collections.smshare.kai.plugins.module_utils import registry as reg
from ansible_collections.smshare.kai.plugins.modules import registry_image_info

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "module_utils"))
from test_registry import HOST, PASSWORD, USER, FakeRegistry, index, single  # noqa: E402


class Done(Exception):
    def __init__(self, result, failed):
        super().__init__(result)
        self.result, self.failed = result, failed


def run(monkeypatch, fake, args):
    monkeypatch.setattr(reg, "open_url", fake)

    def exit_json(self, **kwargs):
        raise Done(kwargs, False)

    def fail_json(self, **kwargs):
        raise Done(kwargs, True)

    monkeypatch.setattr(basic.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(basic.AnsibleModule, "fail_json", fail_json)
    with patch_module_args(args):
        with pytest.raises(Done) as done:
            registry_image_info.main()
    return done.value


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


def test_auth_failure_fails_with_kind_status_and_image(monkeypatch):
    done = run(monkeypatch, registry_with_images(), {
        "images": [HOST + "/kai/binder:t1"], "username": USER, "password": "not-the-password"})
    assert done.failed
    assert done.result["kind"] == "auth" and done.result["status"] == 401
    assert done.result["image"] == HOST + "/kai/binder:t1"
    assert "not-the-password" not in json.dumps(done.result)


def test_forbidden_fails_with_403(monkeypatch):
    fake = registry_with_images()
    fake.deny.add("kai/binder")
    done = run(monkeypatch, fake, {"images": [HOST + "/kai/binder:t1"], "username": USER, "password": PASSWORD})
    assert done.failed and done.result["status"] == 403 and done.result["kind"] == "denied"


def test_bad_reference_fails_before_any_request(monkeypatch):
    fake = registry_with_images()
    done = run(monkeypatch, fake, {"images": ["https://" + HOST + "/kai/binder:t1"]})
    assert done.failed and done.result["kind"] == "reference"
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
