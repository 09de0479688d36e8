"""module_utils/cluster_access.py: one way for the collection's modules to load cluster access."""
import pytest
import yaml

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access as ca


def kubeconfig(path, contexts=("lab",), server="https://127.0.0.1:6443"):
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "not-a-secret"}}],
        "contexts": [{"name": name, "context": {"cluster": "c", "user": "u"}} for name in contexts],
        "current-context": contexts[0]}))
    return str(path)


@pytest.fixture(autouse=True)
def no_default_kubeconfig(tmp_path, monkeypatch):
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))


def test_the_given_kubeconfig_and_context_choose_the_server(tmp_path):
    path = kubeconfig(tmp_path / "kc", contexts=("lab", "other"))
    assert ca.api_client(path, "other").configuration.host == "https://127.0.0.1:6443"


def test_KUBECONFIG_is_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", kubeconfig(tmp_path / "kc", server="https://10.0.0.1:6443"))
    assert ca.api_client().configuration.host == "https://10.0.0.1:6443"


def test_a_default_kubeconfig_that_does_not_load_is_named_by_its_path(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "from-env"))
    with pytest.raises(ca.AccessError, match=r"^cannot load kubeconfig .*/from-env: "):
        ca.api_client()


@pytest.mark.parametrize("context, expected", [
    (None, r"^cannot load kubeconfig .*/missing: "),
    ("lab", r"^cannot load kubeconfig .*/missing \(context lab\): "),
])
def test_a_kubeconfig_that_does_not_load_is_named(tmp_path, context, expected):
    with pytest.raises(ca.AccessError, match=expected):
        ca.api_client(str(tmp_path / "missing"), context)


def test_a_context_the_kubeconfig_lacks_is_named(tmp_path):
    with pytest.raises(ca.AccessError, match=r"\(context nope\).*nope"):
        ca.api_client(kubeconfig(tmp_path / "kc"), "nope")


def test_no_kubeconfig_outside_a_pod_says_so():
    with pytest.raises(ca.AccessError, match="^no kubeconfig and not in a cluster"):
        ca.api_client()


def test_the_options_match_kubernetes_core_so_one_module_defaults_entry_serves_both():
    assert ca.ARGUMENT_SPEC == {"kubeconfig": {"type": "path"}, "context": {"type": "str"}}
