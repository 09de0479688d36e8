#!/usr/bin/env bash
# Runs a playbook from an installed release tarball by FQCN, against a stand-in
# GPU node on localhost: proves the artifact carries its modules, module_utils
# and playbooks. Usage: release_smoke.sh DIR (DIR/collections holds the install).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
dir=$1
installed=$dir/collections/ansible_collections/smshare/kai
test -f "$installed/MANIFEST.json"

# A stand-in r615 node: driver installed and loaded, one A100.
root=$dir/standin-root
mkdir -p "$root/usr/share/nvidia-standin" "$root/run/nvidia-standin" "$root/etc/nvidia-standin"
driver='{"version": "615.71.09", "branch": 615, "cuda_version": "13.4", "open": true}'
echo "$driver" > "$root/usr/share/nvidia-standin/driver.json"
echo "$driver" > "$root/run/nvidia-standin/loaded.json"
echo '{"gpus": [{"name": "NVIDIA A100-SXM4-80GB", "uuid": "GPU-0b7e1c52-3f1d-4a8e-9c2b-5d6f7a8b9c01", "pci_bus_id": "00000000:07:00.0", "memory_total_mib": 81920, "multiprocessor_count": 108, "compute_cap": "8.0"}], "nvswitches": 0}' \
  > "$root/etc/nvidia-standin/gpus.json"

cd "$dir"   # away from the source tree and its ansible.cfg
env -u ANSIBLE_CONFIG \
  ANSIBLE_COLLECTIONS_PATH="$dir/collections" \
  NVIDIA_STANDIN_ROOT="$root" PATH="$repo/lab/standin/bin:$PATH" \
  ansible-playbook smshare.kai.gpu_facts -i localhost, -c local \
    -e smshare_gpu_nodes=localhost \
    -e 'ansible_python_interpreter={{ ansible_playbook_python }}'
