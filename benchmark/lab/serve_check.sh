#!/bin/bash
# A patched server started by `sglang-blackwell serve` with a tuned all-reduce table: it must come up, answer a
# request and log which all-reduce path it uses for which sizes (P7's log lines). Run from the repository root
# with the lab stack on PYTHONPATH (/tmp/site) and the lab pair in /tmp/lab (another pair: SGLB_LAB_TARGET,
# SGLB_LAB_DRAFT, e.g. the 61-layer /tmp/lab61/target and /tmp/lab61/draft):
#   bash benchmark/lab/serve_check.sh TABLE OUTDIR
# Writes OUTDIR/serve-plan.txt (what serve chose and why), OUTDIR/server.log, OUTDIR/choices.txt (the logged
# all-reduce choices), OUTDIR/generate.json. Exit 0 when the server answered and logged its choices.
set -u
table=${1:?usage: serve_check.sh TABLE OUTDIR}; out=${2:?usage: serve_check.sh TABLE OUTDIR}
[ -f "$table" ] || { echo "serve_check: no table at $table"; exit 3; }
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 TORCH_SYMMMEM=CUDA
port=${PORT:-30100}
target=${SGLB_LAB_TARGET:-/tmp/lab/target}; draft=${SGLB_LAB_DRAFT:-/tmp/lab/draft}
for d in "$target" "$draft"; do [ -f "$d/config.json" ] || { echo "serve_check: no $d/config.json"; exit 3; }; done
args=(--model-path "$target" --tp 2 --port "$port" --host 127.0.0.1 --skip-tokenizer-init
      --disable-custom-all-reduce --disable-radix-cache --attention-backend triton
      --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 16 --mem-fraction-static 0.5
      --trust-remote-code --speculative-algorithm EAGLE3 --speculative-draft-model-path "$draft"
      --speculative-num-steps 2 --speculative-eagle-topk 1 --speculative-num-draft-tokens 3)
python3 -m sglang_blackwell.cli serve --table "$table" --dry-run -- "${args[@]}" > "$out/serve-plan.txt" 2>&1
setsid python3 -m sglang_blackwell.cli serve --table "$table" -- "${args[@]}" > "$out/server.log" 2>&1 &
pid=$!
ok=0
for _ in $(seq 1 200); do
  if python3 -c "import urllib.request as u; u.urlopen('http://127.0.0.1:$port/health', timeout=2)" 2>/dev/null; then
    ok=1; break
  fi
  kill -0 $pid 2>/dev/null || break
  sleep 1
done
if [ $ok = 1 ]; then
  python3 - "$port" > "$out/generate.json" <<'PY'
import json, sys, urllib.request as u
body = {"input_ids": [100, 101, 102, 103], "sampling_params": {"max_new_tokens": 16, "temperature": 0}}
req = u.Request(f"http://127.0.0.1:{sys.argv[1]}/generate", json.dumps(body).encode(),
                {"Content-Type": "application/json"})
print(u.urlopen(req, timeout=60).read().decode())
PY
fi
kill -TERM -- "-$pid" 2>/dev/null; sleep 5; kill -KILL -- "-$pid" 2>/dev/null
for p in $(ps -o pid= -s "$pid" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
sleep 2
grep -E "TorchSymmMemCommunicator|AR\+residual\+RMSNorm fusion|SGLANG_TORCH_SYMM_MEM|SGLANG_FLASHINFER_ALLREDUCE" \
  "$out/server.log" | sort -u > "$out/choices.txt"
echo "serve_check: health=$ok; plan:"; cat "$out/serve-plan.txt"
echo "serve_check: logged choices:"; cat "$out/choices.txt"
echo "serve_check: generate: $(head -c 300 "$out/generate.json" 2>/dev/null)"
echo "serve_check: GPU processes left: $(nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -c .)"
[ $ok = 1 ] && [ -s "$out/choices.txt" ]
