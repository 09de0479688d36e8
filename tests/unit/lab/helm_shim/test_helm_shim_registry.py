"""The helm shim's OCI support: `registry login/logout` as kubernetes.core's
helm_registry_auth sends them, and where helm keeps the logins."""
import io
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[4] / "lab"))

from helm_shim.argv import Refusal, parse  # noqa: E402
from helm_shim import commands  # noqa: E402
from helm_shim.main import main  # noqa: E402


def test_registry_login_as_kubernetes_core_sends_it():
    parsed = parse("registry login registry.example:5000 --username=admin --password-stdin --insecure".split())
    assert parsed.command == ("registry", "login") and parsed.args == ["registry.example:5000"]
    assert parsed.flags == {"username": "admin", "password_stdin": True, "insecure": True}
    assert parse("registry logout registry.example:5000".split()).command == ("registry", "logout")


@pytest.mark.parametrize("flag", ["--ca-file=/ca.crt", "--cert-file=/c", "--key-file=/k"])
def test_tls_file_flags_are_refused_with_the_reason(flag):
    with pytest.raises(Refusal) as info:
        parse(["registry", "login", "r:5000", "--username=u", "--password-stdin", flag])
    assert "helm-python-sdk's registry client" in str(info.value)


def test_registry_config_follows_helms_environment(tmp_path):
    assert commands.registry_config({"HELM_REGISTRY_CONFIG": "/x/r.json"}) == "/x/r.json"
    assert commands.registry_config({"HELM_CONFIG_HOME": "/cfg"}) == "/cfg/registry/config.json"
    assert commands.registry_config({"XDG_CONFIG_HOME": "/xdg"}) == "/xdg/helm/registry/config.json"


def test_login_without_a_password_fails_like_helm(monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    out, err = io.StringIO(), io.StringIO()
    rc = main(["registry", "login", "r:5000", "--username=u", "--password-stdin"],
              environ={"HELM_REGISTRY_CONFIG": str(tmp_path / "c.json")}, stdout=out, stderr=err)
    assert rc == 1 and "username and password are required" in err.getvalue()


def test_oci_references():
    assert commands.is_oci("oci://ghcr.io/kai-scheduler/kai-scheduler/kai-scheduler")
    assert not commands.is_oci("/charts/kai-scheduler")
