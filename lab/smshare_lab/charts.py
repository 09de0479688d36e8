"""The lab's chart repository: the stand-in charts of lab/standin/charts, packaged
and indexed as a Helm chart repository (index.yaml + .tgz) and served over
http on 127.0.0.1, where the controller's helm (lab/bin/helm) fetches them with
`--repo`, as it would from https://helm.ngc.nvidia.com/nvidia.
"""
import gzip
import hashlib
import io
import tarfile
import time
import urllib.request

import yaml

from . import proc
from .paths import LAB_DIR, STATE, port
from .util import LabError, wait_for

SOURCES = LAB_DIR / "standin" / "charts"
OUT = STATE / "charts"
PORT = port(18680)
URL = f"http://127.0.0.1:{PORT}"
NAME = "chart-repo"
# Fixed timestamps: the same chart sources give the same archive (and digest).
EPOCH = 1767225600


def _package(chart_dir):
    """A chart archive as `helm package` makes it: <name>/... in a gzipped tar."""
    meta = yaml.safe_load((chart_dir / "Chart.yaml").read_text())
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(p for p in chart_dir.rglob("*") if p.is_file()):
            data = path.read_bytes()
            info = tarfile.TarInfo(f"{meta['name']}/{path.relative_to(chart_dir)}")
            info.size, info.mode, info.mtime = len(data), 0o644, EPOCH
            tar.addfile(info, io.BytesIO(data))
    packed = io.BytesIO()
    with gzip.GzipFile(fileobj=packed, mode="wb", mtime=EPOCH) as handle:
        handle.write(raw.getvalue())
    return meta, packed.getvalue()


def build():
    """Package every stand-in chart and write index.yaml; returns the folder."""
    OUT.mkdir(parents=True, exist_ok=True)
    entries = {}
    for chart_dir in sorted(p for p in SOURCES.iterdir() if (p / "Chart.yaml").is_file()):
        meta, data = _package(chart_dir)
        archive = f"{meta['name']}-{meta['version']}.tgz"
        target = OUT / archive
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
        entry = dict(meta, digest=hashlib.sha256(data).hexdigest(), urls=[archive],
                     created=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH)))
        entries.setdefault(meta["name"], []).append(entry)
    index = {"apiVersion": "v1", "entries": entries,
             "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(EPOCH))}
    text = yaml.safe_dump(index, sort_keys=True)
    path = OUT / "index.yaml"
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)
    return OUT


def answers():
    try:
        with urllib.request.urlopen(f"{URL}/index.yaml", timeout=2) as resp:
            return resp.status == 200
    except OSError:
        return False


def up():
    """Build and serve the chart repository; returns its URL."""
    if not SOURCES.is_dir():
        return ""
    build()
    if not proc.pid_of(NAME):
        if answers():
            raise LabError(f"port {PORT} on 127.0.0.1 answers but the lab did not start it; free it first")
        proc.start(NAME, ["/usr/bin/python3", "-m", "http.server", "--bind", "127.0.0.1",
                          "--directory", str(OUT), str(PORT)])
        wait_for(answers, 20, f"the chart repository at {URL} (see .lab/logs/{NAME}.log)")
    return URL


def status():
    if not SOURCES.is_dir():
        return None, "no stand-in charts"
    if not proc.pid_of(NAME):
        return False, "not running"
    return answers(), URL
