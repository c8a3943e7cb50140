"""GPU check: an NCCL profile installed with `sglang-blackwell nccl install` reaches NCCL inside spawned
worker processes (how SGLang starts its TP workers), read from each worker's own interpreter start.

    python3 test/gpu/nccl_profile_check.py [--gpus 2] [--keep DIR]

Makes a throwaway venv (--system-site-packages, so the machine's torch is used), installs the pcie-ll profile
into it, then from that venv: clears every NCCL_* in the parent, spawns one process per GPU, runs one NCCL
all-reduce with NCCL_DEBUG=INFO and checks (a) the sum is right, (b) every worker's environment holds the
profile, (c) NCCL's log says "NCCL_PROTO set by environment to LL" and the same for NCCL_ALGO (the other
profile variables are reported as NCCL logged them). Prints one JSON line; exit 0 = pass.
Bounded: every subprocess has a timeout. Never touches multicast (NCCL_NVLS_ENABLE=0 is kept/forced).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PROFILE = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_P2P_LEVEL": "SYS", "NCCL_MAX_NCHANNELS": "16",
           "NCCL_BUFFSIZE": "16777216", "NCCL_NTHREADS": "512"}

WORKER = r'''
import json, os, sys
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

def run(rank, world, port, q, cpu):
    seen = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    if not cpu:
        torch.cuda.set_device(rank)
    dist.init_process_group("gloo" if cpu else "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    x = torch.full((3, 7168), float(rank + 1), device="cpu" if cpu else "cuda", dtype=torch.bfloat16)
    dist.all_reduce(x)
    if not cpu:
        torch.cuda.synchronize()
    q.put({"rank": rank, "env": seen, "value": float(x[0, 0])})
    dist.destroy_process_group()

if __name__ == "__main__":
    world, port, cpu = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "cpu"
    for k in [k for k in os.environ if k.startswith("NCCL_") and k not in ("NCCL_DEBUG", "NCCL_NVLS_ENABLE")]:
        del os.environ[k]  # the workers must get the profile from their own interpreter start
    os.environ.pop("SGLANG_BLACKWELL_NCCL_APPLIED", None)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=run, args=(r, world, port, q, cpu)) for r in range(world)]
    for p in procs:
        p.start()
    results = [q.get(timeout=240) for _ in procs]
    for p in procs:
        p.join(60)
    print("RESULT " + json.dumps({"ranks": sorted(results, key=lambda r: r["rank"]),
                                  "exitcodes": [p.exitcode for p in procs]}))
'''


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gpus", type=int, default=2)
    ap.add_argument("--keep", help="keep the venv and logs here")
    ap.add_argument("--cpu", action="store_true", help="dry run of the plumbing: gloo on CPU, no NCCL log")
    a = ap.parse_args()
    work = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="sglb-nccl-gpu-"))
    work.mkdir(parents=True, exist_ok=True)
    t0 = time.monotonic()
    venv = work / "venv"
    base = subprocess.run([sys.executable, "-c", "import sys; print(sys._base_executable)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    subprocess.run([base, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)], check=True,
                   timeout=120)
    py = venv / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if not k.startswith("NCCL_") or k == "NCCL_NVLS_ENABLE"}
    # this interpreter's torch (a venv's, or the system's) must be importable in the throwaway venv too
    where = subprocess.run([sys.executable, "-c", "import os, torch; print(os.path.dirname(os.path.dirname("
                            "torch.__file__)))"], capture_output=True, text=True)
    if where.returncode != 0:
        print(json.dumps({"pass": False, "error": f"{sys.executable} cannot import torch"}))
        return 1
    torch_site = where.stdout.strip()
    paths = [str(REPO / "python"), torch_site] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    cmd = [sys.executable, "-m", "sglang_blackwell.cli", "nccl", "install", "--python", str(py), "--profile",
           "pcie-ll"]
    inst = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    script = work / "worker.py"
    script.write_text(WORKER)
    run_env = dict(env, NCCL_DEBUG="INFO", NCCL_NVLS_ENABLE="0")
    port = 29500 + os.getpid() % 1000
    r = subprocess.run([str(py), str(script), str(a.gpus), str(port), "cpu" if a.cpu else "gpu"],
                       capture_output=True, text=True,
                       env=run_env, timeout=300)
    (work / "worker.log").write_text(r.stdout + r.stderr)
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("RESULT ")), None)
    res = json.loads(line[7:]) if line else None
    log = r.stdout + r.stderr
    # NCCL logs "NCCL_PROTO set by environment to LL" (strings) / "... to 16777216." (integers)
    found = re.findall(r"(NCCL_[A-Z0-9_]+) set by environment to (\S+)", log)
    set_by_env = {k: v.rstrip(".") for k, v in found}
    want_sum = sum(range(1, a.gpus + 1))
    checks = {
        "install_ok": inst.returncode == 0,
        "install_hook": "via pth" if "via pth" in inst.stdout else "via sitecustomize"
        if "via sitecustomize" in inst.stdout else None,
        "workers_ok": bool(res) and res["exitcodes"] == [0] * a.gpus,
        "workers_saw_profile": bool(res) and all(
            all(rk["env"].get(k) == v for k, v in PROFILE.items()) for rk in res["ranks"]),
        "allreduce_correct": bool(res) and all(rk["value"] == want_sum for rk in res["ranks"]),
        # NCCL logs only the variables it reads in this run; PROTO and ALGO are always read at init
        "nccl_read_proto_algo": None if a.cpu else (set_by_env.get("NCCL_PROTO") == "LL"
                                                    and set_by_env.get("NCCL_ALGO") == "Ring"),
    }
    logged = {k: set_by_env.get(k) for k in PROFILE}
    passed = all(v for k, v in checks.items() if k != "install_hook" and v is not None)
    out = {"pass": passed, "checks": checks, "nccl_logged_profile_vars": logged,
           "nccl_set_by_environment": set_by_env,
           "ranks": res["ranks"] if res else None, "install_stdout": inst.stdout.strip().splitlines()[:1],
           "install_stderr": inst.stderr.strip()[-500:],
           "worker_tail": log.strip().splitlines()[-15:] if not res else [],
           "seconds": round(time.monotonic() - t0, 1), "workdir": str(work)}
    print(json.dumps(out))
    return 0 if out["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
