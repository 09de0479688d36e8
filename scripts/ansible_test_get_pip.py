"""Offline stand-in for pip's get-pip.py bootstrap, used by ansible-test.

ansible-test bootstraps pip in each sanity virtualenv by downloading get-pip.py
from a host this machine cannot reach; it also accepts a cached copy, so
scripts/sanity.sh puts this file there. It installs the interpreter's bundled
pip (ensurepip), then the exact pip version ansible-test asked for.

ansible-test runs pip with PIP_CONFIG_FILE=/dev/null and a filtered
environment, so the machine's CA settings never reach it; a sitecustomize in
the throwaway venv points pip at the system CA bundle instead.
"""
import ensurepip
import os
import subprocess
import sys
import sysconfig

GET_PIP_ONLY = {"--no-setuptools", "--no-wheel"}
SYSTEM_CA = "/etc/ssl/certs/ca-certificates.crt"

ensurepip.bootstrap(upgrade=True)
if os.path.exists(SYSTEM_CA):
    site = sysconfig.get_paths()["purelib"]
    with open(os.path.join(site, "sitecustomize.py"), "w", encoding="utf-8") as hook:
        hook.write("import os\nos.environ.setdefault('PIP_CERT', %r)\n" % SYSTEM_CA)
    os.environ.setdefault("PIP_CERT", SYSTEM_CA)
args = [a for a in sys.argv[1:] if a not in GET_PIP_ONLY]
subprocess.check_call([sys.executable, "-m", "pip", "install", *args])
