#!/bin/bash
# Where the first concurrent burst after a server start stalls, when no Triton kernel compiles (the grid's first
# c=4 burst on a fresh lab machine: TTFT 7-9 s, baseline and EAGLE-3 alike, 0-1 Triton compiles). Run on a warm
# lab machine after session_grid.sh A (the pair in /tmp/lab61), carrying .whl/c2 and .whl/pyspy:
#
#   bash benchmark/lab/first_burst_probe.sh
#
# Installs the bundle (if needed) and py-spy, starts the non-speculative server on the 61-layer pair with
# --log-requests, sends 3 requests one at a time and then 4 at once (256-token token-id prompts, 64 tokens out),
# and while the burst runs dumps every server process's Python stacks with py-spy every 1.5 s. Writes
# $OUT/first-burst-probe.txt (client timings, the stack dumps, the server log's lines around the burst).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
export FLASHINFER_CUDA_ARCH_LIST=9.0a FLASHINFER_WORKSPACE_BASE=/tmp/jit/fi TVM_FFI_CACHE_DIR=/tmp/jit/tvmffi
export TRITON_CACHE_DIR=/tmp/jit/triton MAX_JOBS=16
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=$OUT/first-burst-probe.txt
T0=$(date +%s)
log() { echo "[probe $(( $(date +%s) - T0 ))s] $*" | tee -a "$R"; }
if [ ! -f /tmp/site/.sglang-blackwell-bundle.json ]; then
  bash .whl/c2/install.sh --stage /tmp/bundle --target /tmp/site 2>&1 | tail -2 || exit 3
fi
python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .whl/pyspy/*.whl || exit 3
SPY=/tmp/pyspy/bin/py-spy
export PYTHONPATH=/tmp/site
setsid python3 -m sglang.launch_server --model-path /tmp/lab61/target --port 30000 --mem-fraction-static 0.7 \
  --attention-backend triton --cuda-graph-backend-prefill disabled --cuda-graph-max-bs-decode 16 \
  --log-requests --log-requests-level 0 > /tmp/probe-server.log 2>&1 &
SID=$!
for _ in $(seq 240); do
  curl -s -o /dev/null -w '%{http_code}' localhost:30000/health 2>/dev/null | grep -q 200 && break; sleep 1
done
log "server up after $(( $(date +%s) - T0 )) s"
pids=$(ps -o pid= -s "$SID" | tr '\n' ' ')
log "server processes: $(for p in $pids; do echo -n "$p:$(cat "/proc/$p/comm") "; done)"
cat > /tmp/probe_client.py <<'EOF'
import json, random, sys, threading, time, urllib.request
def req(i, out):
    ids = [random.Random(i).randrange(100, 2000) for _ in range(256)]
    body = json.dumps({"model": "/tmp/lab61/target", "prompt": ids, "max_tokens": 64, "temperature": 0,
                       "ignore_eos": True, "stream": True}).encode()
    t0 = time.time()
    r = urllib.request.urlopen(urllib.request.Request("http://127.0.0.1:30000/v1/completions", data=body,
                               headers={"Content-Type": "application/json"}), timeout=300)
    first = None
    for line in r:
        if first is None and line.startswith(b"data:"):
            first = time.time()
    out.append({"i": i, "sent": round(t0, 3), "ttft_s": round(first - t0, 3), "e2e_s": round(time.time() - t0, 3)})
def call(path, data=None):
    r = urllib.request.Request("http://127.0.0.1:30000" + path, data=data, method="POST" if data else "GET",
                               headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(r, timeout=60).read()
res = []
call("/flush_cache", b"{}"); call("/server_info")
for i in range(3):
    req(i, res)
print("sequential", json.dumps(res), flush=True)
res = []
call("/flush_cache", b"{}"); call("/server_info")  # as the grid does before every burst
print("burst at", round(time.time(), 3), flush=True)
ts = [threading.Thread(target=req, args=(10 + i, res)) for i in range(4)]
[t.start() for t in ts]; [t.join() for t in ts]
print("burst", json.dumps(res), flush=True)
EOF
python3 /tmp/probe_client.py > /tmp/probe-client.out 2>&1 &
CL=$!
# the burst starts after the 3 sequential requests (~0.6 s each): dump stacks from then on
sleep 1.5
for k in $(seq 9); do
  echo "=== dump $k at $(date +%s.%N | cut -c1-14)" >> /tmp/probe-spy.txt
  for p in $pids; do
    echo "--- pid $p $(cat "/proc/$p/comm" 2>/dev/null)" >> /tmp/probe-spy.txt
    timeout 5 $SPY dump --pid "$p" --nonblocking >> /tmp/probe-spy.txt 2>&1
  done
  kill -0 $CL 2>/dev/null || break
  sleep 1
done
wait $CL
log "client: $(cat /tmp/probe-client.out | tr '\n' ' ')"
kill -TERM -- "-$SID" 2>/dev/null; sleep 5; kill -KILL -- "-$SID" 2>/dev/null
{ echo "=== client"; cat /tmp/probe-client.out; echo "=== py-spy"; cat /tmp/probe-spy.txt;
  echo "=== server log (short lines, after ready)"; awk 'length($0) < 400' /tmp/probe-server.log | sed -n '/fired up/,$p' | head -120; } >> "$R"
ls -la "$OUT"
