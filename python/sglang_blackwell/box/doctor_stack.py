"""doctor's items about the installed software stack, in the environment doctor runs in: torch, nccl_version,
fork_builds, flashinfer_trtllm_comm, kernel_sass, spec_verify (torch's build and arch list, this fork's patched
wheels, what their kernels accept on this GPU, and what an EAGLE-3 server does at long context)."""

from __future__ import annotations

import os
import re

from ..artifacts.fatbin import Arch
from ..artifacts.wheel import MARKER_FILE
from . import sglang_env
from .allreduce_paths import package_dir
from .attention_backend import SM12X_MAJOR, UPSTREAM_VERIFY_KERNEL, VERIFY_KERNEL
from .doctor_check import INSTALL, TARGET_CAPABILITY, Check, Context, item
from .sglang_env import Reading
from .stackinfo import arch_covered, dist_facts, kernel_facts, trtllm_comm_probe


def check_torch(c: Context) -> Check:
    tf = c.torch
    if not tf.get("installed"):
        err = f" ({tf['error']})" if tf.get("error") else ""
        return item("torch", "fail", f"torch is not installed here{err}", f"{INSTALL} (brings the base's CUDA torch)",
                    tf)
    archs = tf.get("arch_list") or []
    has120 = any(a.startswith(("sm_120", "compute_120")) for a in archs)
    detail = (f"torch {tf['version']} (CUDA {tf.get('cuda') or 'none: CPU build'}), arch list "
              f"{' '.join(archs) or 'empty'}; sm_120 in it: {'yes' if has120 else 'no'}")
    data = dict(tf, sm_120=has120)
    if c.no_gpu:
        return item("torch", "info", detail, data=data)
    if not tf.get("cuda"):
        return item("torch", "fail", detail, f"install a CUDA build of torch: {INSTALL}", data)
    missing = sorted({g.arch for g in c.topo.gpus if not arch_covered(archs, g.major, g.minor)})
    if archs and missing:
        return item("torch", "fail", f"{detail}; no kernels for {', '.join(missing)}",
                    f"install a torch built for this GPU (cu128/cu130 wheels have sm_120): {INSTALL}", data)
    if not tf.get("cuda_available"):
        return item("torch", "fail", f"{detail}; torch.cuda.is_available() is False ({tf.get('error')})",
                    "check the driver and CUDA_VISIBLE_DEVICES: `nvidia-smi` must list the GPUs", data)
    return item("torch", "ok", detail, data=data)


def check_nccl_version(c: Context) -> Check:
    wheels = {n: d["version"] for n in ("nvidia-nccl-cu13", "nvidia-nccl-cu12") if (d := dist_facts(n))}
    v = c.torch.get("nccl")
    data = {"torch_nccl": v, "wheels": wheels}
    if not c.torch.get("installed"):
        return item("nccl_version", "n/a", "torch not installed", data=data)
    if v is None:
        why = "this torch has no NCCL (CPU build)" if not c.torch.get("cuda") else "NCCL version unknown"
        if c.no_gpu:
            return item("nccl_version", "n/a", why, data=data)
        return item("nccl_version", "warn", why, f"install a CUDA build of torch: {INSTALL}", data)
    extra = "; " + ", ".join(f"{k} {w}" for k, w in wheels.items()) if wheels else ""
    return item("nccl_version", "ok", f"NCCL {v} (torch){extra}", data=data)


def check_fork_builds(c: Context) -> Check:
    data = {"sglang": c.sglang, "flashinfer": c.flashinfer}
    if c.sglang is None and c.flashinfer is None:
        return item("fork_builds", "fail", "neither sglang nor flashinfer-python is installed here", INSTALL,
                    data)
    parts, fix, missing = [], None, False
    for label, d in (("sglang", c.sglang), ("flashinfer-python", c.flashinfer)):
        if d is None:
            parts.append(f"{label}: not installed")
            fix, missing = INSTALL, True
        elif d["marker"] and d["local_label"]:
            patches = ", ".join(p for p in d["patches"] if p) or "none"
            base = d["marker"].get("base")
            parts.append(f"{label} {d['version']}: this fork (base {base}, patches {patches})")
        elif d["local_label"]:
            parts.append(f"{label} {d['version']}: carries our label but no {MARKER_FILE}")
            fix = f"reinstall the patched wheels: {INSTALL}"
        else:
            parts.append(f"{label} {d['version']}: upstream build (none of this fork's patches)")
            fix = f"{INSTALL} (patched wheels; `{INSTALL} --upstream` rolls back)"
    return item("fork_builds", "fail" if missing else "warn" if fix else "ok", "; ".join(parts), fix, data)


def check_trtllm(c: Context) -> Check:
    if c.flashinfer is None:
        return item("flashinfer_trtllm_comm", "n/a", "flashinfer-python not installed")
    for cap in c.topo.capabilities() or [TARGET_CAPABILITY]:
        c.say(f"flashinfer trtllm_comm for capability {cap} ...")
        c.trtllm[cap] = trtllm_comm_probe(cap)

    def word(r: dict) -> str:
        if r.get("accepted"):
            return "accepted"
        return f"{'rejected' if r.get('accepted') is False else 'cannot tell'}: {r.get('error')}"

    detail = "; ".join(f"capability {cap} ({r['arch']}): {word(r)}" for cap, r in c.trtllm.items())
    majors = next((r["majors"] for r in c.trtllm.values() if r.get("majors")), None)
    if majors:
        detail += f"; its arch table: majors {majors}"
    if c.no_gpu:
        return item("flashinfer_trtllm_comm", "n/a", f"no GPU; for the target {detail}", data=c.trtllm)
    if any(r.get("accepted") is False for r in c.trtllm.values()):
        return item("flashinfer_trtllm_comm", "warn", f"{detail} (matters only with all-reduce fusion on)",
                    f"install this fork's flashinfer (patch P1): {INSTALL}; or flashinfer-python >= 0.6.17, "
                    "whose table lists major 12", c.trtllm)
    if any(r.get("accepted") is None for r in c.trtllm.values()):
        return item("flashinfer_trtllm_comm", "warn", detail,
                    "make `python -c 'import flashinfer.jit.comm'` work in this environment", c.trtllm)
    return item("flashinfer_trtllm_comm", "ok", detail, data=c.trtllm)


def _archs(names: list[str]) -> list[Arch]:
    return [Arch(int(re.sub(r"\D", "", n)), n[-1] if n[-1] in "af" else "") for n in names]


def check_kernel_sass(c: Context) -> Check:
    k = kernel_facts()
    if k is None:
        return item("kernel_sass", "n/a", "sgl_kernel is not installed here", INSTALL)
    name = f"{k['dist']['name']} {k['dist']['version']}" if k["dist"] else "sgl_kernel"
    caps = [(g.major, g.minor) for g in c.topo.gpus] or [(12, 0)]
    want = "/".join(sorted({f"sm_{ma}{mi}" for ma, mi in caps}))
    lines = []
    for f in k["files"]:
        if "error" in f:
            lines.append(f"{f['path']}: {f['error']}")
            continue
        f["runs_here"] = all(any(a.runs_on(ma, mi) for a in _archs(f["sass"])) for ma, mi in caps)
        ptx = f" + PTX {' '.join(f['ptx'])}" if f["ptx"] else ""
        lines.append(f"{f['path']}: {' '.join(f['sass']) or 'no SASS'}{ptx} -> {want}: "
                     f"{'yes' if f['runs_here'] else 'NO'}")
    detail = f"{name} at {k['root']}: " + "; ".join(lines)
    data = dict(k, gpu_archs=want)
    if c.no_gpu:
        return item("kernel_sass", "n/a", f"no GPU; for the target {TARGET_CAPABILITY}: {detail}", data=data)
    core = [f for f in k["files"] if "common_ops" in f["path"] and "error" not in f]
    if core and not any(f["runs_here"] for f in core):
        return item("kernel_sass", "fail", detail,
                    "install the kernel wheel the base pins (the cu130 build holds sm_120a), or build it "
                    "from sgl-kernel/ for this arch", data)
    return item("kernel_sass", "ok", detail, data=data)


SPLITKV_ENV = "SGLANG_ENABLE_SPLITKV_VERIFY"
WARMUP_ENV = "SGLANG_ENABLE_BATCH_SIZE_WARMUP"
OTHER_BACKENDS = ("flashinfer", "fa3", "trtllm_mla", "flashmla", "cutlass_mla")  # sglang MLA backends, not P8's
SPLITKV_MAJORS = (9, SM12X_MAJOR)  # where P8's split-KV verify kernel is built and validated (the backend's gate)


def _switch_part(r: Reading, what: str, rule: str) -> tuple[str, str | None]:
    """A switch that is off, or set to a value sglang does not read, as the server will take it (sglang_env):
    (detail, the fix where the value is not one sglang reads)."""
    if not r.understood:
        return (f"{what} {'on' if r.on else 'off'}: {r.text()} (it reads {rule})",
                f"set {r.name}=0 to turn it off, or unset it")
    return f"{what} turned off by {r.text()}", None


def check_spec_verify(c: Context) -> Check:
    """What an EAGLE-3 server on this box does at long context: target-verify attention through the split-KV
    kernel (P8: MLA targets, topk 1, the triton attention backend, SM90/SM12x) or upstream's serial prefill
    kernel, and whether the server warms up what its first bursts would compile (P9)."""
    if c.sglang is None:
        return item("spec_verify", "n/a", "sglang is not installed here", INSTALL)
    patches = set(c.sglang.get("patches") or [])
    caps = c.topo.capabilities() or [TARGET_CAPABILITY]
    majors = c.topo.majors() or {SM12X_MAJOR}  # no GPU here: the target's (TARGET_CAPABILITY)
    env = sglang_env.installed(package_dir("sglang"), c.sglang.get("version"))
    split, warm = (env.read(SPLITKV_ENV, True, os.environ), env.read(WARMUP_ENV, True, os.environ))
    data = {"patches": sorted(patches & {"P8", "P9"}), "capabilities": list(caps),
            "env": {k: os.environ.get(k) for k in (SPLITKV_ENV, WARMUP_ENV)},
            "env_read": {r.name: {"value": r.value, "on": r.on, "understood": r.understood} for r in (split, warm)},
            "env_rule": env.rule.source}
    parts, fix, status = [], None, "ok"
    p8_runs = False  # whether target-verify attention runs P8's kernel under --attention-backend triton
    where = "this GPU" if not c.no_gpu else f"capability {TARGET_CAPABILITY} (the target; no GPU here)"
    if "P8" not in patches:
        parts.append(f"sglang {c.sglang['version']} has no split-KV target-verify on CUDA: verify attention walks "
                     "the whole prefix per head (EAGLE-3 ran at 0.52x the baseline at 2k tokens and 0.19x at 8k "
                     "on the lab)")
        fix, status = f"{INSTALL} (P8 is in the 0.5.14 and 0.5.23 lines)", "warn"
    elif not split.understood or not split.on:
        text, fix = _switch_part(split, "split-KV target-verify (P8)", env.rule.text())
        parts.append(text)
        status = "warn" if fix else "info"
    elif not majors & set(SPLITKV_MAJORS):
        parts.append(f"split-KV target-verify (P8) is off on capability {', '.join(map(str, caps))} (built and "
                     "validated for SM90 and SM12x)")
        status = "info"
    else:
        parts.append(f"split-KV target-verify (P8) on for {where}: MLA targets (DeepSeek-V3, Kimi-K2.x) at "
                     f"--speculative-eagle-topk 1 with --attention-backend triton ({split.text()})")
        p8_runs = True
        parts.append(f"verify kernel: {VERIFY_KERNEL} under --attention-backend triton (what `sglang-blackwell "
                     "serve` adds to a speculative launch on SM12x, and sglang's default for MLA models there); "
                     f"under any other backend ({', '.join(OTHER_BACKENDS)}) P8 does not run and verify runs that "
                     "backend's own kernels, which no receipt of ours measured")
    if not p8_runs:
        parts.append(f"verify kernel: {UPSTREAM_VERIFY_KERNEL} under --attention-backend triton")
    data["verify_kernel"] = VERIFY_KERNEL if p8_runs else UPSTREAM_VERIFY_KERNEL
    if "P9" not in patches:
        parts.append("no first-use warm-up: the first concurrent burst after a start waits for kernels to compile "
                     "(~10 s on the lab)")
        fix, status = fix or f"{INSTALL} (P9 is in the 0.5.14 and 0.5.23 lines)", "warn"
    elif not warm.understood or not warm.on:
        text, wfix = _switch_part(warm, "first-use warm-up (P9)", env.rule.text())
        parts.append(text)
        fix = fix or wfix
        status = "warn" if wfix else ("info" if status == "ok" else status)
    else:
        parts.append("first-use warm-up (P9) on: a 1024-token prefill and, with speculation, every batch-size "
                     f"bucket before the server reports ready ({warm.text()})")
    return item("spec_verify", status, "; ".join(parts), fix, data)
