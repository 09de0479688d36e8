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
import stat
from urllib.parse import quote, quote_plus


def kept_env(folder):
    """Environment that keeps a run's Ansible log and temp folders in folder (to be searched)."""
    return {"ANSIBLE_LOG_PATH": str(folder / "ansible.log"), "ANSIBLE_LOCAL_TEMP": str(folder / "local-tmp"),
            "ANSIBLE_REMOTE_TEMP": str(folder / "remote-tmp"), "ANSIBLE_ASYNC_DIR": str(folder / "async")}


def secret_forms(user, password, *others):
    """The password (and each other secret) clear, base64, URL-encoded (path and
    form style) and JSON-escaped, and base64 of user:password (a registry auth)."""
    forms = set()
    for secret in (password,) + others:
        forms |= {secret, base64.b64encode(secret.encode()).decode(), quote(secret, safe=""),
                  quote_plus(secret), json.dumps(secret)[1:-1]}
    forms.add(base64.b64encode(("%s:%s" % (user, password)).encode()).decode())
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
