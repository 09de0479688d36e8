#!/usr/bin/env bash
# Apache-2.0
# The real-GPU check of smshare.kai's MPS modules (issue 3). Needs: an NVIDIA GPU
# with its driver (nvidia-smi, nvidia-cuda-mps-control), python3 with PyTorch
# (CUDA), root. No Kubernetes, no network: ansible-core comes from wheels
# (tests/gpu/fetch-wheels.sh, run where PyPI is reachable) unless already installed.
#
# It starts a real MPS control daemon with smshare.kai.mps_control, sets a default
# active thread percentage of 50, runs a CUDA client that asks for 100% through
# CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, checks that the client sees half the SMs
# (rounded down), stops the daemon with the module and checks nothing is left.
# Then the smoke test's greedy neighbour (fraction_smoke_test greedy_neighbour):
# the daemon started afresh with a half-GPU pod's caps as its defaults (50 %, a
# pinned device memory limit of (GPU memory - 1 GiB) / 2), the smoke test's probe
# (plugins/module_utils/gpu_probe.py, CUDA's driver API through ctypes) run greedy
# (it asks 100 % and drops its own pinned limit, takes 4/5 of the cap, tries the cap
# plus an eighth and holds) and, beside it, as a neighbour that keeps to its share;
# judged by the smoke test's own rule (check_greedy), and the probe's SM count
# compared with PyTorch's (lab/standin/CONTRACT.md's assumptions it settles).
# Under MPS v3 (r615+: `nvidia-cuda-mps-control -p 3 namespace --help` lists create,
# delete, get, list and set) it restarts the daemon with the gpu-fractioning fork's
# configuration and drives every namespace verb through the modules as the fork's
# mpsd sends them: create and cap a namespace, read its pipe directory back, a
# client capped there, listed while attached and its namespace refused a change
# meanwhile, a name the daemon refuses refused first, delete; without v3 it says
# so plainly and runs the classic check only.
# It records the raw output of every MPS verb the modules use, to replace the
# (unverified) formats in plugins/module_utils/mps.py.
#
# Usage: tests/gpu/run.sh [EVIDENCE_DIR]   (default: $OUT, else tests/output/gpu)
# Env:   SMSHARE_GPU_WHEELS  wheel directory (default tests/output/gpu-wheels)
#        SMSHARE_GPU_PROBE_PATH  put first on the probe's PYTHONPATH (the dry run's stand-in ctypes)
# Exit:  0 all checks held; 1 a check failed; 3 no GPU/driver; 4 no
#        nvidia-cuda-mps-control; 5 no PyTorch with CUDA; 6 no ansible-core.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
repo=$PWD
evidence_dir=${1:-${OUT:-$repo/tests/output/gpu}}
wheels=${SMSHARE_GPU_WHEELS:-$repo/tests/output/gpu-wheels}
python=${SMSHARE_GPU_PYTHON:-python3}
mkdir -p "$evidence_dir"

say() { printf 'gpu-check: %s\n' "$*" >&2; }
give_up() {  # code, message: record why and stop
    say "$2"
    "$python" - "$evidence_dir/gpu-evidence.json" "$1" "$2" <<'PY' || true
import json, sys, time
json.dump({"result": "not run", "exit_code": int(sys.argv[2]), "reason": sys.argv[3],
           "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
          open(sys.argv[1], "w"), indent=2)
PY
    exit "$1"
}

command -v "$python" >/dev/null || { say "no $python on PATH"; exit 5; }
command -v nvidia-smi >/dev/null \
    || give_up 3 "no NVIDIA GPU here: nvidia-smi is not installed. Run this on a GPU node with the NVIDIA driver."
nvidia-smi -L >/dev/null 2>&1 \
    || give_up 3 "no NVIDIA GPU here: 'nvidia-smi -L' failed ($(nvidia-smi -L 2>&1 | head -1))."
command -v nvidia-cuda-mps-control >/dev/null \
    || give_up 4 "nvidia-cuda-mps-control is not installed on this machine: MPS cannot be tested. Install the driver's compute utilities (nvidia-compute-utils-<branch>) or use a node that has them."
"$python" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    || give_up 5 "$python has no PyTorch with a usable CUDA device: the SM check needs one."

# ansible-core: installed, or from the carried wheels
if ! "$python" -c 'import ansible' 2>/dev/null || ! command -v ansible >/dev/null; then
    ls "$wheels"/ansible_core-*.whl >/dev/null 2>&1 \
        || give_up 6 "ansible-core is not installed and no wheels in $wheels: run tests/gpu/fetch-wheels.sh where PyPI is reachable and carry that folder."
    site=$(mktemp -d /tmp/smshare-gpu-site.XXXXXX)
    "$python" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" "$wheels"/*.whl \
        || give_up 6 "installing the ansible-core wheels from $wheels failed."
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}" PATH="$site/bin:$PATH"
fi

# the collection from this tree
collections=$(mktemp -d /tmp/smshare-gpu-collections.XXXXXX)
mkdir -p "$collections/ansible_collections/smshare"
ln -s "$repo" "$collections/ansible_collections/smshare/kai"
printf '[defaults]\ncollections_path = %s\n' "$collections" >"$collections/ansible.cfg"
interpreter=$(command -v "$python")
export ANSIBLE_COLLECTIONS_PATH=$collections ANSIBLE_CONFIG=$collections/ansible.cfg ANSIBLE_NOCOLOR=1 \
       ANSIBLE_PYTHON_INTERPRETER=$interpreter ANSIBLE_LOCALHOST_WARNING=false \
       ANSIBLE_INVENTORY_UNPARSED_WARNING=false PYTHONUNBUFFERED=1

"$python" "$repo/tests/gpu/gpu_check.py" --repo "$repo" --evidence "$evidence_dir/gpu-evidence.json"
rc=$?
rm -rf "$collections"
exit $rc
