#!/usr/bin/env bash
# The collection's docs site, built as the Ansible ecosystem builds collection
# docs (`make docs`): `antsibull-docs sphinx-init` writes the Sphinx project,
# its build.sh runs `antsibull-docs collection` (a page per module, role, filter
# and test plugin, from the installed collection: .collections -> this tree)
# and `sphinx-build -W` (a warning fails the build). The versions are
# requirements/python.txt's (antsibull-docs, Sphinx, sphinx-ansible-theme).
#
# Offline: sphinx-init's conf.py fetches intersphinx inventories from the web;
# here they are replaced by one local inventory of the few labels outside this
# collection that the pages link to (Ansible's docs, other collections'
# plugins), so those links point where docs.ansible.com has them and nothing is
# downloaded. A page that links to a label not listed below fails the build
# with "undefined label": add the label here.
#
# Output: $SMSHARE_DOCS_DIR (default build/docs); the site is its build/html/.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/env.sh

dest=${SMSHARE_DOCS_DIR:-$PWD/build/docs}
mkdir -p "$(dirname "$dest")"
rm -rf "$dest"
mkdir -m 700 "$dest"     # antsibull-docs writes only into a folder that only its owner can write
dest=$(cd "$dest" && pwd)

antsibull-docs sphinx-init --use-current --fail-on-error --dest-dir "$dest" \
  --project smshare.kai --copyright "smshare.kai maintainers" --title "smshare.kai" \
  smshare.kai

python3 - "$dest/ansible.inv" <<'PY'
"""A Sphinx intersphinx inventory (version 2) of the external labels the pages use."""
import sys
import zlib

LABELS = (  # label, page under https://docs.ansible.com/projects/ansible/devel/, title
    ("ansible_configuration_settings", "reference_appendices/config.html#ansible-configuration-settings",
     "Ansible Configuration Settings"),
    ("common_return_values", "reference_appendices/common_return_values.html#common-return-values",
     "Return Values"),
    ("action_plugins", "plugins/action.html#action-plugins", "Action plugins"),   # build_wait's note
    ("ansible_collections.kubernetes.core.k8s_info_module",
     "collections/kubernetes/core/k8s_info_module.html#ansible-collections-kubernetes-core-k8s-info-module",
     "kubernetes.core.k8s_info module"),
)
header = b"# Sphinx inventory version 2\n# Project: Ansible\n# Version: devel\n" \
         b"# The remainder of this file is compressed using zlib.\n"
body = "".join("%s std:label -1 %s %s\n" % row for row in LABELS).encode()
with open(sys.argv[1], "wb") as out:
    out.write(header + zlib.compress(body))
PY
cat >> "$dest/conf.py" <<EOF

# Added by scripts/docs.sh: no download at build time (see there).
intersphinx_mapping = {
    'ansible_devel': ('https://docs.ansible.com/projects/ansible/devel/', '$dest/ansible.inv'),
}
# Straight quotes: a templated default shown in a description must stay valid Jinja when copied.
smartquotes = False
EOF

"$dest/build.sh"
echo "docs: $dest/build/html/index.html"
