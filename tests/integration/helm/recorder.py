#!/usr/bin/env python
"""argv recorder for the helm shim's contract tests (kubernetes.core's binary_path points here).

Every call runs lab/bin/helm (the real shim, as its own process);
one JSON line per call goes to $SMSHARE_HELM_RECORDER_LOG: argv, the helm
environment, rc, stdout, stderr. With $SMSHARE_HELM_RECORDER_CANNED (a JSON
file {"list": "...", "get values": "..."}) the named subcommands answer with
that text instead of reaching a cluster, once the shim's parser and environment
check have accepted the argv.
"""
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.realpath(__file__)))))
SHIM = os.path.join(REPO, "lab", "bin", "helm")
sys.path.insert(0, os.path.join(REPO, "lab"))

from helm_shim.argv import Refusal, UsageError, parse  # noqa: E402  pylint: disable=wrong-import-position
from helm_shim.commands import check_environment  # noqa: E402  pylint: disable=wrong-import-position


def canned_answer(argv):
    path = os.environ.get("SMSHARE_HELM_RECORDER_CANNED")
    if not path:
        return None
    try:
        parsed = parse(argv)
        check_environment(os.environ)
    except (Refusal, UsageError):
        return None  # let the shim refuse it exactly as it would
    with open(path, encoding="utf-8") as handle:
        answers = json.load(handle)
    return answers.get(" ".join(parsed.command))


def main():
    argv = sys.argv[1:]
    answer = canned_answer(argv)
    if answer is None:
        shim = subprocess.run([SHIM, *argv], capture_output=True, text=True, check=False)
        rc, out, err = shim.returncode, shim.stdout, shim.stderr
    else:
        rc, out, err = 0, answer, ""
    entry = {
        "tag": os.environ.get("SMSHARE_HELM_RECORDER_TAG", ""),
        "argv": argv,
        "env": {k: v for k, v in os.environ.items()
                if k.startswith("HELM_") or k == "KUBECONFIG"},
        "canned": answer is not None,
        "rc": rc,
        "stdout": out,
        "stderr": err,
    }
    with open(os.environ["SMSHARE_HELM_RECORDER_LOG"], "a", encoding="utf-8") as log:
        log.write(json.dumps(entry) + "\n")
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
