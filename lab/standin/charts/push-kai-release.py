#!/usr/bin/env python3
"""STAND-IN (lab only): publish the stand-in KAI-Scheduler chart the way KAI's
release workflow publishes the real one, so the pilot installs it from oci://
exactly as it installs upstream's:

    helm package ./deployments/kai-scheduler --version V --app-version V
    helm push kai-scheduler-V.tgz oci://<registry>/kai-scheduler/kai-scheduler

Here the registry is the lab's (TLS with the lab CA, htpasswd login) and the
chart is lab/standin/forks/kai-scheduler/deployments/kai-scheduler, whose file://
dependency is built first (as `helm dependency build`).

    .venv/bin/python lab/standin/charts/push-kai-release.py [--version v0.0.0-standin] [--state .lab]

Prints the chart reference; idempotent (pushing the same version again replaces the tag).
"""
import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "lab" / "standin" / "forks" / "kai-scheduler" / "deployments"
REPOSITORY = "kai-scheduler/kai-scheduler"   # oci://<registry>/kai-scheduler/kai-scheduler/kai-scheduler


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--version", default="v0.0.0-standin")
    parser.add_argument("--state", default=os.environ.get("SMSHARE_LAB_STATE", str(ROOT / ".lab")))
    args = parser.parse_args(argv)
    registry = Path(args.state) / "registry"
    try:
        address = (registry / "address").read_text().strip()
        username = (registry / "username").read_text().strip()
        password = (registry / "password").read_text().strip()
    except OSError as exc:
        print(f"the lab's registry is not up ({exc}): run lab/labctl up", file=sys.stderr)
        return 1
    # Helm's Go code reads the CA bundle from SSL_CERT_FILE when the library loads.
    os.environ["SSL_CERT_FILE"] = str(registry / "ca.crt")
    import helm_python  # noqa: E402 (after SSL_CERT_FILE)

    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "deployments"
        shutil.copytree(CHART, work)
        for built in (work / "kai-scheduler" / "charts", work / "kai-scheduler" / "Chart.lock"):
            shutil.rmtree(built, ignore_errors=True) if built.is_dir() else built.unlink(missing_ok=True)
        helm_python.dependency_build(str(work / "kai-scheduler"))
        archive = helm_python.package(str(work / "kai-scheduler"), destination=tmp,
                                      version=args.version, app_version=args.version)
        with helm_python.RegistryClient(credentials_file=str(Path(tmp) / "registry.json")) as client:
            client.login(address, username, password)
            client.push(archive, f"oci://{address}/{REPOSITORY}")
    print(f"oci://{address}/{REPOSITORY}/kai-scheduler:{args.version}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
