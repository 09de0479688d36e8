"""Shared pieces of the helm shim tests: paths, the recorder log, playbook runs."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
SHIM = REPO / "lab" / "bin" / "helm"
RECORDER = HERE / "recorder.py"
CHARTS = HERE / "charts"
PLAYBOOKS = HERE / "playbooks"

sys.path.insert(0, str(REPO / "lab"))


def copy_charts(destination):
    """A private copy of the test charts (dependency update writes into them)."""
    target = Path(destination) / "charts"
    shutil.copytree(CHARTS, target)
    return target


def read_log(path):
    if not Path(path).exists():
        return []
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def by_tag(entries, tag):
    return [e for e in entries if e["tag"] == tag]


def argv_of(entries, *words):
    """Recorded argvs whose words include the given subcommand words, in order."""
    found = []
    for entry in entries:
        positional = [a for a in entry["argv"] if not a.startswith("-")]
        if positional[:len(words)] == list(words):
            found.append(entry)
    return found


def run_playbook(playbook, extra_vars, env=None, check=True):
    """ansible-playbook on localhost; returns the CompletedProcess."""
    vars_file = Path(extra_vars["helm_test_workdir"]) / "extra-vars.json"
    vars_file.write_text(json.dumps(extra_vars), encoding="utf-8")
    environ = dict(os.environ)
    environ.update(env or {})
    environ.setdefault("ANSIBLE_CONFIG", str(REPO / "ansible.cfg"))
    environ.setdefault("ANSIBLE_COLLECTIONS_PATH", str(REPO / ".collections"))
    environ["PATH"] = f"{REPO / '.venv' / 'bin'}:{environ.get('PATH', '')}"
    command = ["ansible-playbook", "-i", "localhost,", str(playbook),
               "-e", f"@{vars_file}"]
    result = subprocess.run(command, env=environ, capture_output=True, text=True,
                            timeout=600, check=False)
    if check:
        assert result.returncode == 0, (
            f"{' '.join(command)} failed (rc {result.returncode}):\n"
            f"{result.stdout[-6000:]}\n{result.stderr[-3000:]}")
    return result
