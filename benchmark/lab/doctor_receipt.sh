#!/bin/bash
# On a CUDA box (the GPU lab: 2x H200): the doctor receipt, `nccl show`, and the check that an installed NCCL
# profile reaches NCCL in spawned workers, written into one folder (4 files). Run from the repository root:
#
#   bash benchmark/lab/doctor_receipt.sh [NAME] [OUTDIR]      NAME: lab-h200x2   OUTDIR: $OUT or benchmark/results
#
# Needs only python3 with torch and nvidia-ml-py (no network, nothing installed: the package runs from
# ./python). If the lab bundle is installed in /tmp/site (shared/lab recipe), doctor also reports that stack.
set -uo pipefail
name=${1:-lab-h200x2}
out=${2:-${OUT:-benchmark/results}}
py=${PYTHON:-python3}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}${SITE:+:$SITE}"
[ -d /tmp/site ] && [ -z "${SITE:-}" ] && export PYTHONPATH="$PYTHONPATH:/tmp/site"
rc=0
timeout 300 "$py" -m sglang_blackwell.cli doctor --out "$out/doctor-$name.json" >"$out/doctor-$name.txt"
echo "doctor: exit $? -> $out/doctor-$name.json, $out/doctor-$name.txt"
timeout 120 "$py" -m sglang_blackwell.cli nccl show >"$out/nccl-show-$name.txt" 2>&1 || rc=1
echo "nccl show: -> $out/nccl-show-$name.txt"
timeout 360 "$py" test/gpu/nccl_profile_check.py --gpus 2 >"$out/nccl-profile-check-$name.json" || rc=1
echo "nccl profile check: $(head -c 300 "$out/nccl-profile-check-$name.json")"
exit $rc
