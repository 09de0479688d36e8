#!/usr/bin/env bash
# Apache-2.0
# Downloads ansible-core and what the GPU machine's image lacks, as wheels for
# CPython 3.12 on x86_64, into tests/output/gpu-wheels (ignored by git; carry it
# to the GPU machine). Run where PyPI is reachable.
set -euo pipefail
cd "$(dirname "$0")/../.."
dest=${1:-tests/output/gpu-wheels}
mkdir -p "$dest"
# ansible-core's needs that the GPU image does not already have (jinja2, PyYAML,
# packaging are there); versions pinned to what requirements/python.txt uses.
pins=$(grep -iE '^(ansible-core|resolvelib|cryptography|cffi|pycparser)==' requirements/python.txt)
for pin in $pins; do
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
        --platform any -d "$dest" "$pin"
done
ls -1 "$dest"
