#!/bin/bash
# On one CUDA GPU (the GPU lab): `sglang-blackwell nccl install --nccl-conf` makes the NCCL profile reach an
# NCCL program that Python never started (nccl_conf_check.c: ncclCommInitAll on 1 rank + one ncclAllReduce),
# NCCL_DEBUG=INFO reports the values, and both off switches hold. Takes well under a minute. From the repo root:
#
#   bash benchmark/lab/nccl_conf_check.sh [OUTDIR]     OUTDIR: $OUT, else /tmp/nccl-conf-check
#   bash benchmark/lab/nccl_conf_check.sh --compile-only [OUTDIR]      (any machine with nvcc: the build alone)
#
# Needs python3 >= 3.10 (the package runs from ./python; nothing is installed outside a throwaway venv), nvcc,
# and NCCL's nccl.h + libnccl.so.2: $NCCL_HOME (include/, lib/), else the nvidia-nccl-cu13 wheel of python3
# (site-packages/nvidia/nccl). Writes to OUTDIR: build.log, install.txt, nccl.conf (the file install wrote),
# run-<case>.log (the program's output with NCCL_DEBUG=INFO), nccl-topo.xml (NCCL_TOPO_DUMP_FILE of case on),
# verdict.json. Exit 0: every case as expected. The cases:
#   on          NCCL_CONF_FILE=<our file>: the profile's values, from the file, in the program's environment
#   user-wins   the same with NCCL_PROTO=Simple exported: the environment wins, the rest still from the file
#   devnull     NCCL_CONF_FILE=/dev/null (the off switch for every process): none of the profile
#   kill-switch a Python of the environment, SGLANG_BLACKWELL_NCCL=0 and NCCL_CONF_FILE=<our file>, starts the
#               program: none of the profile (the startup block pointed NCCL_CONF_FILE at /dev/null)
#   via-python  the same without the kill switch: the profile
set -uo pipefail
compile_only=0
if [ "${1:-}" = "--compile-only" ]; then compile_only=1; shift; fi
out=${1:-${OUT:-/tmp/nccl-conf-check}}
py=${PYTHON:-python3}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
mkdir -p "$out"
work=$(mktemp -d /tmp/nccl-conf-check.XXXXXX)
trap 'rm -rf "$work"' EXIT

nccl_home=${NCCL_HOME:-$("$py" -c 'import importlib.util as u; s = u.find_spec("nvidia.nccl")
print(list(s.submodule_search_locations)[0] if s else "")' 2>/dev/null)}
if [ -z "$nccl_home" ] || [ ! -f "$nccl_home/include/nccl.h" ] || [ ! -f "$nccl_home/lib/libnccl.so.2" ]; then
  echo "nccl_conf_check: no nccl.h + libnccl.so.2 (set NCCL_HOME, or install nvidia-nccl-cu13 for $py)" >&2
  exit 2
fi
prog=$work/nccl_conf_check
if ! nvcc -o "$prog" "$here/nccl_conf_check.c" -I"$nccl_home/include" -Xlinker "$nccl_home/lib/libnccl.so.2" \
     -Xlinker -rpath="$nccl_home/lib" >"$out/build.log" 2>&1; then
  echo "nccl_conf_check: build failed:" >&2; cat "$out/build.log" >&2; exit 3
fi
echo "built $prog against $nccl_home ($(nvcc --version | tail -1))" | tee -a "$out/build.log"
[ $compile_only = 1 ] && exit 0

conf=$work/etc/nccl.conf
mkdir -p "$work/etc"
export PYTHONPATH="$repo/python"
sb() { "$py" -m sglang_blackwell.cli "$@"; }
venv=$work/venv
if "$py" -m venv --without-pip "$venv" >>"$out/install.txt" 2>&1; then
  sb nccl install --python "$venv/bin/python" --profile pcie-ll --nccl-conf "$conf" >>"$out/install.txt" 2>&1
  echo "install: exit $?" >>"$out/install.txt"
else  # no venv module: the file alone (cases kill-switch and via-python then say so)
  echo "no venv: the profile written with nccl show --format nccl-conf" >>"$out/install.txt"
  sb nccl show --profile pcie-ll --format nccl-conf >"$conf"
  venv=
fi
cp "$conf" "$out/nccl.conf"
mapfile -t keys < <(grep -E '^NCCL_[A-Z0-9_]+=' "$conf" | cut -d= -f1)

# every process on the lab runs with multicast off; nothing else from this shell reaches the program
base=(env -i PATH="$PATH" HOME="$work" NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
      NCCL_DEBUG=INFO "NCCL_DEBUG_SUBSYS=INIT,BOOTSTRAP,ENV" ${CUDA_VISIBLE_DEVICES:+CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES})
parent=(-c 'import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))')
run() {  # case, then the command
  local name=$1; shift
  timeout 60 "$@" "${keys[@]}" >"$out/run-$name.log" 2>&1
  echo "rc $?" >>"$out/run-$name.log"
}
run on "${base[@]}" NCCL_CONF_FILE="$conf" NCCL_TOPO_DUMP_FILE="$out/nccl-topo.xml" "$prog"
run user-wins "${base[@]}" NCCL_CONF_FILE="$conf" NCCL_PROTO=Simple "$prog"
run devnull "${base[@]}" NCCL_CONF_FILE=/dev/null "$prog"
if [ -n "$venv" ]; then
  run kill-switch "${base[@]}" NCCL_CONF_FILE="$conf" SGLANG_BLACKWELL_NCCL=0 "$venv/bin/python" "${parent[@]}" "$prog"
  run via-python "${base[@]}" NCCL_CONF_FILE="$conf" "$venv/bin/python" "${parent[@]}" "$prog"
fi

"$py" - "$out" "$conf" <<'EOF'
import json, re, sys
from pathlib import Path
out, conf = Path(sys.argv[1]), Path(sys.argv[2])
profile = dict(ln.split("=", 1) for ln in conf.read_text().splitlines() if re.match(r"^NCCL_[A-Z0-9_]+=", ln))
expect = {"on": profile, "user-wins": dict(profile, NCCL_PROTO="Simple"), "devnull": {},
          "kill-switch": {}, "via-python": profile}
cases, ok = {}, True
for name, want in expect.items():
    log = out / f"run-{name}.log"
    if not log.exists():
        cases[name] = {"ran": False, "ok": None, "why": "no venv here (see install.txt)"}
        continue
    text = log.read_text(errors="replace")
    env = {m[1]: m[2] for m in re.finditer(r"^env (\w+)=(.*)$", text, re.M)}
    got = {k: v for k, v in env.items() if v != "(unset)"}
    # NCCL's own report of what it uses: "NCCL INFO NCCL_PROTO set by environment to LL" (it reads the file
    # into the environment first); every one for a profile variable must show the expected value
    info = {k: v for k, v in re.findall(r"NCCL INFO (NCCL_\w+) set by environment to ([^\s.]+)", text)
            if k in profile}
    info_ok = (bool(info) and all(want.get(k) == v for k, v in info.items())) if want else not info
    c = {"ran": True, "rc": int(re.findall(r"^rc (\d+)$", text, re.M)[-1]),
         "allreduce_ok": "allreduce_ok 1" in text,
         "nccl_version": (re.findall(r"nccl_version (\d+)", text) or [None])[0],
         "env": got, "expected": want, "info_set_by_environment": [f"{k}={v}" for k, v in sorted(info.items())]}
    c["ok"] = c["rc"] == 0 and c["allreduce_ok"] and got == want and info_ok
    ok &= c["ok"]
    cases[name] = c
topo = out / "nccl-topo.xml"
verdict = {"ok": ok and topo.is_file() and topo.stat().st_size > 0, "cases": cases, "profile": profile,
           "nccl_topo_dump": {"file": topo.name, "bytes": topo.stat().st_size if topo.is_file() else 0}}
(out / "verdict.json").write_text(json.dumps(verdict, indent=1) + "\n")
for name, c in cases.items():
    print(f"{name:12s} {'OK  ' if c['ok'] else 'FAIL' if c['ok'] is False else 'n/a '} "
          + (f"env={c['env']} info={c['info_set_by_environment']}" if c["ran"] else c["why"]))
print(f"nccl-topo.xml: {verdict['nccl_topo_dump']['bytes']} bytes; verdict: {'OK' if verdict['ok'] else 'FAIL'}")
sys.exit(0 if verdict["ok"] else 1)
EOF
