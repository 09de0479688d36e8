"""The guide's test images, as stand-ins in the lab registry (labctl up --nodes).

`<registry>/nvidia/cuda:13.3.1-base-ubuntu24.04` (the smoke pods: sh, env,
sleep, cat and the stand-in nvidia-smi; python3 with the stand-in ctypes and
driver the greedy-neighbour probe calls, first on PYTHONPATH) and
`<registry>/nvidia/k8s/cuda-sample:devicequery` (entrypoint: the stand-in
deviceQuery), both on the stand-in images' Python base layer
(lab/standin/forks/hack/standin-base.py) with lab/standin/testimage/. Built with
buildah in a private store (.lab/test-images), pushed once per content.
"""
import base64
import hashlib
import json
import ssl
import sys
import tempfile
import urllib.error
import urllib.request
from pathlib import Path

from .paths import LAB_DIR, STATE
from .util import run, say

TOOLS = LAB_DIR / "standin" / "testimage"
# The stand-in ctypes (and libcuda.so.1) of the greedy-neighbour probe: the base's Python has no ctypes.
PYLIB = "pylib/ctypes/__init__.py"
BASE_SCRIPT = LAB_DIR / "standin" / "forks" / "hack" / "standin-base.py"
WORK = STATE / "test-images"
IMAGES = {
    "nvidia/cuda:13.3.1-base-ubuntu24.04": None,
    "nvidia/k8s/cuda-sample:devicequery": ["/cuda-samples/deviceQuery"],
}


MANIFEST_TYPES = ", ".join(("application/vnd.oci.image.manifest.v1+json",
                            "application/vnd.docker.distribution.manifest.v2+json",
                            "application/vnd.oci.image.index.v1+json"))


def _buildah(*args):
    return run(["buildah", "--root", str(WORK / "root"), "--runroot", str(WORK / "run"), "--storage-driver", "vfs",
                *map(str, args)], capture=True)


def refs(registry):
    return [f"{registry['address']}/{name}" for name in IMAGES]


def _in_registry(registry):
    """Whether the registry serves both images (its data may be gone while the stamp stays)."""
    context = ssl.create_default_context(cafile=registry["ca"])
    login = base64.b64encode(f"{registry['username']}:{registry['password']}".encode()).decode()
    for name in IMAGES:
        repo, tag = name.rsplit(":", 1)
        request = urllib.request.Request(f"https://{registry['address']}/v2/{repo}/manifests/{tag}", method="HEAD",
                                         headers={"Authorization": "Basic " + login, "Accept": MANIFEST_TYPES})
        try:
            with urllib.request.urlopen(request, context=context, timeout=10):
                pass
        except (urllib.error.URLError, OSError):
            return False
    return True


def up(registry):
    """Build and push both images unless this content is in the registry already."""
    WORK.mkdir(parents=True, exist_ok=True)
    base = Path(run([sys.executable, str(BASE_SCRIPT), str(WORK / "base")], capture=True).stdout.strip())
    key = hashlib.sha256(base.name.encode() + registry["address"].encode() + b"".join(
        (TOOLS / n).read_bytes() for n in ("gpuview.py", "nvidia-smi", "deviceQuery", PYLIB))).hexdigest()
    stamp = WORK / "pushed.json"
    if stamp.is_file() and json.loads(stamp.read_text()).get("key") == key and _in_registry(registry):
        return refs(registry)
    say("test images: the guide's nvidia/cuda and cuda-sample:devicequery (stand-ins) -> lab registry")
    for name, entrypoint in IMAGES.items():
        ref = f"{registry['address']}/{name}"
        with tempfile.TemporaryDirectory(dir=WORK) as tmp:
            folder = Path(tmp)
            (folder / "base.tar").hardlink_to(base)
            for tool in ("gpuview.py", "nvidia-smi", "deviceQuery"):
                (folder / tool).write_bytes((TOOLS / tool).read_bytes())
                (folder / tool).chmod(0o755)
            (folder / "ctypes.py").write_bytes((TOOLS / PYLIB).read_bytes())
            lines = ["FROM scratch", "ADD base.tar /",
                     "COPY gpuview.py /usr/lib/nvidia-standin/gpuview.py",
                     "COPY ctypes.py /usr/lib/nvidia-standin/pylib/ctypes/__init__.py",
                     "COPY nvidia-smi /usr/bin/nvidia-smi",
                     "COPY deviceQuery /cuda-samples/deviceQuery",
                     "ENV PATH=/usr/local/bin:/usr/bin:/bin PYTHONDONTWRITEBYTECODE=1 "
                     "PYTHONPATH=/usr/lib/nvidia-standin/pylib",
                     f"LABEL io.smshare.lab.standin={name}"]
            lines.append(f"ENTRYPOINT {json.dumps(entrypoint)}" if entrypoint else 'CMD ["/bin/sh"]')
            (folder / "Containerfile").write_text("\n".join(lines) + "\n")
            _buildah("build", "--quiet", "--pull=never", "-t", ref, folder)
        _buildah("push", "--quiet", "--cert-dir", registry["cert_dir"],
                 "--creds", f"{registry['username']}:{registry['password']}", ref, f"docker://{ref}")
    stamp.write_text(json.dumps({"key": key, "refs": refs(registry)}))
    return refs(registry)
