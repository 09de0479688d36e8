# Apache-2.0
"""Where a credential may show up once a tool has encoded it, and a search for
those forms in a run's output and in the files it wrote.

    proc = lab.playbook(play, "-vvv", env=kept_env(tmp_path))   # Ansible's log and temp folders in tmp_path
    forms = secret_forms(user, password)
    assert not found_in_text(forms, proc.stdout + proc.stderr)
    assert not found_in_files(forms, [tmp_path], allowed={auth_file: 0o600})
"""
import base64
import json
import os
import re
import stat
from urllib.parse import quote, quote_plus


def task_ran(output, name):
    """Whether the task named name ran (its TASK header followed by ok or changed, not skipping)."""
    parts = output.split("TASK [")
    for part in parts[1:]:
        header, _sep, body = part.partition("]")
        if header.split(" : ")[-1] == name:
            return bool(re.search(r"^(ok|changed): ", body, re.M))
    return False


def kept_env(folder):
    """Environment that puts a run's Ansible log and the controller's temp and async
    folders in folder, to be searched for what the run left there (Ansible removes its
    temp files as it goes). The hosts' remote temp stays theirs: a container node's
    /tmp is not where the podman connection copies to."""
    return {"ANSIBLE_LOG_PATH": str(folder / "ansible.log"), "ANSIBLE_LOCAL_TEMP": str(folder / "local-tmp"),
            "ANSIBLE_ASYNC_DIR": str(folder / "async")}


def base64_cores(secret):
    """What base64 of any text holding secret must contain, whatever the secret's
    offset in it: the encoding of secret at each of the three byte alignments,
    less the characters its neighbours share."""
    cores = []
    data = secret.encode()
    for pad in range(3):
        encoded = base64.b64encode(b"\0" * pad + data).decode().rstrip("=")
        start = (pad * 4 + 2) // 3          # characters that carry padding bits
        end = len(encoded) - (1 if (pad + len(data)) % 3 else 0)
        cores.append(encoded[start:end])
    return cores


def secret_forms(user, password, *others):
    """The password (and each other secret) clear, base64 (alone or inside a larger
    encoded text, such as a Secret's .dockerconfigjson), URL-encoded (path and form
    style, upper and lower case hex) and JSON-escaped, and user:password's base64
    (a registry auth), also base64-encoded again (the auth inside a dockerconfigjson)."""
    forms = set()
    for secret in (password,) + others:
        quoted = quote(secret, safe="")
        forms |= {secret, base64.b64encode(secret.encode()).decode(), quoted, quoted.lower(),
                  quote_plus(secret), json.dumps(secret)[1:-1]}
        forms |= set(base64_cores(secret))
    auth = base64.b64encode(("%s:%s" % (user, password)).encode()).decode()
    forms |= {auth, base64.b64encode(auth.encode()).decode()} | set(base64_cores(auth))
    return {f for f in forms if len(f) >= 8}      # a short form would match by chance


def found_in_text(forms, text):
    return sorted(f for f in forms if f in text)


def found_in_files(forms, roots, allowed=None):
    """[(path, why)] for every regular file under roots holding a form: each
    one, unless it is in allowed ({path: the mode it must have}) with that mode."""
    allowed = {str(k): v for k, v in (allowed or {}).items()}
    leaks = []
    for root in roots:
        for folder, _dirs, files in os.walk(str(root)):
            for name in files:
                path = os.path.join(folder, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                with open(path, "rb") as handle:
                    data = handle.read()
                hits = [f for f in forms if f.encode() in data]
                if not hits:
                    continue
                mode = stat.S_IMODE(os.stat(path).st_mode)
                if path in allowed and mode == allowed[path]:
                    continue
                why = "mode %o, not the credential store's %o" % (mode, allowed[path]) if path in allowed \
                    else "holds %d form(s) of the secret" % len(hits)
                leaks.append((path, why))
    return leaks
