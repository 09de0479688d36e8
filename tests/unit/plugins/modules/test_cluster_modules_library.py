# Apache-2.0
"""What every cluster module shares through module_utils/cluster_access: the
kubeconfig/context options and one guarded import of the kubernetes library.
Without the library each module ends with failure=missing_library, before it
reads or changes anything."""
import os
import subprocess
import sys

import pytest

from ansible_collections.smshare.kai.plugins.module_utils import cluster_access
from ansible_collections.smshare.kai.plugins.modules import (
    disruption_budgets_info, fraction_smoke_test, gpu_cluster_info, node_state, release_verify_info, rollout_lock,
    rollout_wait_info, workload_lint)

from module_runner import run_module

# (module, the smallest arguments that get past its own input rules)
CLUSTER_MODULES = [
    (node_state, {"name": "gpu-node-1"}),
    (rollout_lock, {"holder": "ops@bastion"}),
    (gpu_cluster_info, {}),
    (release_verify_info, {"chart": "kai-scheduler", "image_base": "registry.example:5000/kai", "tag": "v1",
                           "components": ["scheduler"]}),
    (fraction_smoke_test, {}),
    (workload_lint, {"namespaces": ["gpu-trial"]}),
    (disruption_budgets_info, {"node": "gpu-node-1"}),
    (rollout_wait_info, {"node": "gpu-node-1", "checks": ["node_ready"], "branch": "615"}),
]


@pytest.mark.parametrize("module, args", CLUSTER_MODULES, ids=lambda item: getattr(item, "__name__", ""))
def test_without_the_library_each_cluster_module_names_it_and_touches_nothing(monkeypatch, module, args):
    monkeypatch.setattr(cluster_access, "KUBERNETES_IMPORT_ERROR", "ImportError: No module named 'kubernetes'")
    monkeypatch.setattr(cluster_access, "api_client", pytest.fail)   # never reached
    done = run_module(monkeypatch, module.main, args)
    assert done.failed
    assert done.result["failure"] == "missing_library"
    assert "kubernetes" in done.result["msg"]
    assert "No module named" in done.result["exception"]


def test_workload_lint_needs_the_library_only_for_the_cluster(monkeypatch, tmp_path):
    monkeypatch.setattr(cluster_access, "KUBERNETES_IMPORT_ERROR", "ImportError: No module named 'kubernetes'")
    manifest = tmp_path / "pod.yaml"
    manifest.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: plain, namespace: default}\n")
    done = run_module(monkeypatch, workload_lint.main, {"paths": [str(manifest)]})
    assert not done.failed, done.result

    done = run_module(monkeypatch, workload_lint.main, {"namespaces": ["gpu-trial"]})
    assert done.result["failure"] == "missing_library"
    assert "for namespaces or the *_from_cluster options" in done.result["msg"]


@pytest.mark.parametrize("module", [item[0] for item in CLUSTER_MODULES], ids=lambda item: item.__name__)
def test_each_cluster_module_takes_kubeconfig_and_context_as_kubernetes_core_does(monkeypatch, module):
    seen = {}

    def capture(self, argument_spec, **_kwargs):
        seen.update(argument_spec)
        raise SystemExit(0)

    monkeypatch.setattr("ansible.module_utils.basic.AnsibleModule.__init__", capture)
    with pytest.raises(SystemExit):
        module.main()
    assert seen["kubeconfig"] == {"type": "path"}
    assert seen["context"] == {"type": "str"}


def test_the_guarded_import_leaves_a_module_importable_without_the_library():
    # A fresh interpreter, so this process's own kubernetes import stays as it is.
    code = ("import sys; sys.modules['kubernetes'] = None\n"
            "from ansible_collections.smshare.kai.plugins.module_utils import cluster_access as ca\n"
            "from ansible_collections.smshare.kai.plugins.modules import node_state, rollout_lock\n"
            "assert ca.kube_client is None and 'kubernetes' in ca.KUBERNETES_IMPORT_ERROR\n"
            "assert not issubclass(Exception, ca.ApiException)\n"
            "try:\n"
            "    ca.api_client('/nonexistent')\n"
            "except ca.AccessError as exc:\n"
            "    print(exc)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path for path in sys.path if path))
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("the kubernetes Python library is missing")
