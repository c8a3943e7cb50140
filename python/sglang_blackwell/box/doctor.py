"""`sglang-blackwell doctor`: what works on this box and why not. Every failing or warning item names its fix.

The items, in this order, with stable ids (the JSON lists all of them on every machine, `n/a` where they
cannot apply): gpus, driver, torch, nccl_version, fork_builds, flashinfer_trtllm_comm, kernel_sass, p2p,
multicast, links, iommu, acs, nccl_env, pcie_ipc, allreduce_paths, spec_verify. The last line says whether the
box is ready to serve this fork: `overall: ready` (exit 0), `overall: ready, with N warning(s)` (exit 0) or
`overall: not ready (N failing: ...)` (exit 1). What a box needs to be ready fails its item when missing: an
NVIDIA GPU (`gpus`: NVML, and what nvidia-smi, /proc/driver/nvidia and torch.cuda say), torch, sglang and
flashinfer-python. Without a GPU it still runs, says so and marks the GPU-only items `n/a`. Software items look
at the environment doctor runs in; `--python` picks the environment whose NCCL startup hook `nccl_env` inspects.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ..artifacts.fatbin import Arch
from ..artifacts.wheel import MARKER_FILE
from ..errors import UserError
from ..patchset.bases import pcie_ipc_line
from ..paths import output_problem
from ..receipts import make_receipt, validate_receipt
from . import gpu_presence
from .allreduce_paths import TRUTHY, Facts, flashinfer_facts, pcie_ipc, plan, sglang_facts
from .hazards import acs_facts, iommu_facts, translated_gpus
from .stackinfo import arch_covered, dist_facts, kernel_facts, torch_facts, trtllm_comm_probe
from .topology import KIND_MEANING, Topology, detect

SCHEMA = "sglang-blackwell/doctor/1"
STATUSES = ("ok", "info", "warn", "fail", "n/a")
OVERALL = {"ok": "ready", "warn": "ready", "fail": "not ready"}  # summary.status -> the last line's verdict
TITLES = {
    "gpus": "GPUs and capability",
    "driver": "NVIDIA driver",
    "torch": "torch build and arch list",
    "nccl_version": "NCCL version",
    "fork_builds": "this fork's sglang/flashinfer builds",
    "flashinfer_trtllm_comm": "flashinfer trtllm_comm JIT (fused all-reduce) accepts this capability",
    "kernel_sass": "SGLang kernel wheel has SASS for this GPU",
    "p2p": "P2P access and native atomics per GPU pair",
    "multicast": "multicast (NVLS, symm-mem multimem)",
    "links": "link topology",
    "iommu": "IOMMU (platform hazard for PCIe P2P)",
    "acs": "ACS on the PCIe bridges above the GPUs (platform hazard for PCIe P2P)",
    "nccl_env": "NCCL environment in effect, and the managed block",
    "pcie_ipc": "FlashInfer PCIe-IPC all-reduce (opt-in: sglang >= 0.5.23, flashinfer >= 0.7.0)",
    "allreduce_paths": "all-reduce path per message size (patched SGLang, no server flags)",
    "spec_verify": "EAGLE-3 target-verify attention at long context (P8) and the first-use warm-up (P9)",
}
CHECK_IDS = tuple(TITLES)
CHECK_KEYS = ("id", "title", "status", "detail", "fix", "data")
TARGET_CAPABILITY = "12.0"  # what this fork is for: reported where the box has no GPU
INSTALL = "sglang-blackwell install"


@dataclass
class Check:
    id: str
    title: str
    status: str
    detail: str
    fix: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"check {self.id}: status {self.status!r} not in {STATUSES}")


def item(id: str, status: str, detail: str, fix: str | None = None, data: dict | None = None) -> Check:
    return Check(id, TITLES[id], status, detail, fix, data or {})


@dataclass
class Report:
    checks: list[Check]
    topology: Topology
    versions: dict[str, Any]
    tp: int | None

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def status(self) -> str:
        return next((s for s in ("fail", "warn") if any(c.status == s for c in self.checks)), "ok")


@dataclass
class Context:
    topo: Topology
    torch: dict[str, Any]
    sglang: dict[str, Any] | None
    flashinfer: dict[str, Any] | None
    python: str | None
    tp: int | None
    progress: Callable[[str], None] | None = None
    trtllm: dict[str, Any] = field(default_factory=dict)  # capability -> trtllm_comm_probe result

    @property
    def no_gpu(self) -> bool:
        return self.topo.gpu_count == 0

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)


# ---- the items --------------------------------------------------------------------------------------------
def check_gpus(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return check_no_gpu(c)
    archs = sorted({g.arch for g in t.gpus})
    detail = f"{t.summary()}; arch {', '.join(archs)}"
    if not any(g.major == 12 for g in t.gpus):
        detail += f" (this fork targets 12.x; {'/'.join(t.capabilities())} takes the upstream paths)"
    return item("gpus", "ok", detail, data=dict(t.machine(), archs=archs, simulated=t.is_simulated))


def check_no_gpu(c: Context) -> Check:
    """NVML (the topology) found no GPU: say what else was asked and what it said, and blame nvidia-ml-py or
    NVML's library only when something else does see a GPU."""
    t = c.topo
    s = gpu_presence.sightings(c.torch)
    said = "; ".join(gpu_presence.describe(s))
    nvml = "; ".join(n.removeprefix("NVML ") for n in t.notes) or "found none"
    data = dict(t.machine(), sightings=s)
    seen = gpu_presence.gpus_seen(s)
    if seen and not s["nvml_module"]:
        return item("gpus", "fail", f"{said}; but nvidia-ml-py is not installed, and doctor reads the GPUs "
                                    "through NVML: the GPU items are n/a",
                    f"pip install nvidia-ml-py into this environment ({sys.executable}), or "
                    "pip install 'sglang-blackwell[gpu]'", data)
    if seen:
        return item("gpus", "fail", f"{said}; but NVML finds none ({nvml}): the GPU items are n/a",
                    "make the driver's NVML library (libnvidia-ml.so.1) loadable here: in a container, start it "
                    "with the GPUs (--gpus all, the NVIDIA container toolkit)", data)
    if t.is_simulated:
        said += f"; the simulated topology {t.source} has no GPU"
    else:  # NVML's own word only where it was asked: nvidia-ml-py matters only on a GPU box
        said += f"; NVML: {nvml}" if s["nvml_module"] else "; NVML: not asked (nvidia-ml-py not installed)"
    return item("gpus", "fail", f"no NVIDIA GPU: {said}: the GPU items are n/a",
                "run it on the GPU box (this fork serves on NVIDIA GPUs, built for Blackwell SM12x), with the NVIDIA "
                "driver loaded: `nvidia-smi` must list the GPUs", data)


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def check_driver(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return item("driver", "n/a", "no GPU")
    data = {"driver": t.driver, "cuda_driver": t.cuda_driver}
    detail = f"driver {t.driver}, supports CUDA up to {t.cuda_driver or 'unknown'}"
    built = c.torch.get("cuda")
    if built and t.cuda_driver and _vt(built) > _vt(t.cuda_driver):
        return item("driver", "fail", f"{detail}; torch is built for CUDA {built}",
                    f"install an NVIDIA driver that supports CUDA {built} (CUDA 13.0 needs 580 or newer), "
                    f"or a torch built for CUDA <= {t.cuda_driver}", data)
    return item("driver", "ok", detail, data=data)


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


def _pairs(names: list[str], total: int) -> str:
    return f"all {total} pairs" if len(names) == total > 2 else ", ".join(names)


def check_p2p(c: Context) -> Check:
    t = c.topo
    if t.gpu_count < 2:
        return item("p2p", "n/a", "no GPU" if c.no_gpu else "one GPU: no pairs")
    rows = [{"pair": [lk.a, lk.b], "kind": lk.kind, "p2p": lk.p2p, "native_atomics": lk.native_atomics,
             "nvml": {"read": lk.p2p_read, "write": lk.p2p_write, "atomics": lk.p2p_atomics},
             "cuda": {"access": lk.cuda_p2p_access, "native_atomics": lk.cuda_native_atomics}}
            for lk in t.links]
    no_p2p = [f"{lk.a}-{lk.b}" for lk in t.links if lk.p2p is False]
    unknown = [f"{lk.a}-{lk.b}" for lk in t.links if lk.p2p is None]
    no_atomics = [f"{lk.a}-{lk.b}" for lk in t.links if lk.native_atomics is False]
    n = len(t.links)
    p2p = (f"missing for {_pairs(no_p2p, n)}" if no_p2p else f"unknown for {_pairs(unknown, n)}" if unknown
           else "all pairs")
    atomics = (f"none on {_pairs(no_atomics, n)}" if no_atomics else "all pairs" if t.all_native_atomics
               else "unknown")
    detail = f"P2P: {p2p}; native atomics: {atomics}"
    if no_atomics:
        detail += " (torch symm-mem barriers need them: that path stays off here; NCCL and PCIe-IPC do not)"
    if no_p2p:
        return item("p2p", "warn", detail,
                    "without P2P, NCCL stages through host memory and custom/IPC all-reduce stay off: check "
                    "the iommu and acs items; GeForce cards need a driver that exposes P2P", {"pairs": rows})
    return item("p2p", "info" if unknown else "ok", detail, data={"pairs": rows})


def check_multicast(c: Context) -> Check:
    if c.no_gpu:
        return item("multicast", "n/a", "no GPU")
    m = c.topo.multicast
    word = {True: "supported on every GPU", False: "not supported",
            None: "unknown (CUDA driver not queried)"}[m]
    extra = "; sglang's multimem / NVLS paths stay off" if m is False else ""
    return item("multicast", "info", f"CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: {word}{extra}",
                data={"per_gpu": {g.index: g.multicast for g in c.topo.gpus}, "all": m})


def check_links(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return item("links", "n/a", "no GPU")
    numa = {g.index: g.numa_node for g in t.gpus}
    pcie = {g.index: {"gen": g.pcie_gen, "width": g.pcie_width, "max_gen": g.pcie_max_gen,
                      "max_width": g.pcie_max_width} for g in t.gpus}
    kinds = ", ".join(f"{k} x{n} ({KIND_MEANING['NV' if k.startswith('NV') else k]})"
                      for k, n in t.link_counts().items()) or "one GPU"
    nodes = sorted({n for n in numa.values() if n is not None}) or "unknown"
    detail = f"{kinds}; NUMA nodes {nodes}"
    data = {"matrix": t.matrix(), "counts": t.link_counts(), "numa": numa, "pcie": pcie}
    narrow = [f"GPU{g.index} x{g.pcie_width} of x{g.pcie_max_width}" for g in t.gpus
              if g.pcie_width and g.pcie_max_width and g.pcie_width < g.pcie_max_width]
    if narrow:
        return item("links", "warn", f"{detail}; PCIe link narrower than the slot: {', '.join(narrow)}",
                    "reseat the card, check the riser and the BIOS PCIe bifurcation settings", data)
    return item("links", "ok", detail, data=data)


def check_iommu(c: Context) -> Check:
    if c.no_gpu:
        return item("iommu", "n/a", "no GPU")
    if c.topo.is_simulated:
        return item("iommu", "n/a", f"simulated topology ({c.topo.source}): this host's IOMMU says nothing "
                                    "about it")
    f = iommu_facts(c.topo)
    translated = translated_gpus(f)
    domains = ", ".join(f"{b}={t}" for b, t in f["gpu_domain_types"].items())
    detail = (f"IOMMU {'enabled (' + ', '.join(f['units']) + ')' if f['units'] else 'not active'}; kernel "
              f"cmdline: {' '.join(f['cmdline']) or '(no iommu options)'}; GPU DMA domains: {domains}; "
              f"nvidia_uvm uvm_disable_hmm={f['uvm_disable_hmm'] or 'n/a'}")
    if translated and c.topo.pcie_only:
        return item("iommu", "warn", f"{detail}; {len(translated)} GPU(s) behind a translating IOMMU: PCIe "
                                     "P2P can hang or slow down",
                    "boot with iommu=pt (Intel: intel_iommu=on iommu=pt; AMD: amd_iommu=on iommu=pt) or turn "
                    "the IOMMU off in the BIOS; if P2P still hangs, try nvidia_uvm uvm_disable_hmm=1", f)
    return item("iommu", "info" if translated else "ok", detail, data=f)


def check_acs(c: Context) -> Check:
    if c.no_gpu:
        return item("acs", "n/a", "no GPU")
    if c.topo.is_simulated:
        return item("acs", "n/a", f"simulated topology ({c.topo.source}): no PCIe bridges to read")
    f = acs_facts(c.topo)
    n = len(f["bridges"])
    if f["lspci"] is None:
        return item("acs", "n/a", f"lspci not available; {n} bridge(s) above the GPUs",
                    "apt-get install pciutils (and run doctor as root) to check ACS", f)
    if f["denied"]:
        return item("acs", "n/a", f"lspci cannot read the capabilities of {', '.join(f['denied'])}",
                    "run doctor as root to read ACS", f)
    if f["redirecting"] and c.topo.gpu_count > 1 and not c.topo.all_nvlink:
        return item("acs", "warn", f"ACS redirects peer traffic to the root complex on "
                                   f"{', '.join(f['redirecting'])}: GPU P2P through them is slow or hangs",
                    "disable ACS in the BIOS, or per bridge at boot: setpci -s <bridge> ECAP_ACS+6.w=0000 "
                    "(NCCL troubleshooting guide)", f)
    return item("acs", "ok", f"{n} bridge(s) above the GPUs, {len(f['with_acs'])} with ACS, none redirecting "
                             "P2P", data=f)


def check_nccl_env(c: Context) -> Check:
    from .nccl import load_profiles, resolve
    from .nccl_hook import state

    # NCCL's config files are read by the rules of the NCCL that torch loads here (for --python: that
    # environment's NCCL wheel)
    nccl = c.torch.get("nccl") if c.python is None else None
    try:
        profiles = load_profiles()
        st = state(c.python, profiles=profiles, nccl_version=nccl if isinstance(nccl, str) else None)
    except UserError as e:
        return item("nccl_env", "warn", str(e), "sglang-blackwell nccl show --python <interpreter>")
    env = "; ".join(f"{r['key']}={r['value'] or '-'} ({r['source']})" for r in st["env"]) or "no NCCL_* set"
    act, cls = st["active"], c.topo.topology_class()
    auto = resolve("auto", c.topo, profiles)
    fix = None
    if act:
        text = f"managed block: profile {act['profile']} via {act['hook']} (resolved for {act['class']})"
        prof = profiles.get(act["profile"])
        if act["class"] != cls:
            fix = "sglang-blackwell nccl install --profile auto (re-resolves for this hardware)"
            text += f"; this machine is {cls!r}: the block no longer matches the hardware"
        elif prof is not None and not prof.fits_class(cls):
            fix = f"sglang-blackwell nccl install --profile {auto.profile.name}"
            text += f"; profile {act['profile']} is not meant for {cls!r}"
    else:
        text = "no managed block"
        if cls == "pcie":
            fix = "sglang-blackwell nccl install (auto picks pcie-ll on PCIe-only boxes)"
            text += f" on a PCIe-only box ({auto.reason})"
    nc = st.get("nccl_conf") or {}
    if act and act.get("nccl_conf"):
        text += f"; NCCL config file {act['nccl_conf']}"
    if st["problems"]:
        only_conf = all(p.startswith("NCCL config block") for p in st["problems"])
        fix = fix or (nc.get("fix") if only_conf else None) or "sglang-blackwell nccl install"
        text += "; " + "; ".join(st["problems"])
    if nc.get("hazards"):
        fix = fix or nc.get("fix")
        text += f"; NCCL config ({nc['rules']['label']}): " + "; ".join(nc["hazards"])
    return item("nccl_env", "warn" if fix else "ok", f"{text}; {env}", fix, st)


def allreduce_facts(c: Context) -> Facts:
    t = c.topo
    cap = t.capabilities()[0] if t.gpus else None
    return Facts(tp=c.tp or t.gpu_count, capability=cap, all_nvlink=t.all_nvlink, all_p2p=t.all_p2p,
                 all_native_atomics=t.all_native_atomics, multicast=t.multicast,
                 sglang=c.sglang["version"] if c.sglang else None,
                 sglang_patches=tuple(p for p in (c.sglang or {}).get("patches", []) if p),
                 flashinfer=c.flashinfer["version"] if c.flashinfer else None,
                 trtllm_comm_accepts=c.trtllm.get(cap, {}).get("accepted") if cap else None,
                 env={k: v for k, v in os.environ.items() if k.startswith("SGLANG_")}, **sglang_facts(),
                 **flashinfer_facts())


def check_pcie_ipc(c: Context) -> Check:
    """The opt-in FlashInfer PCIe-IPC all-reduce of the lines that have it (base.toml [serving]; staged pushes,
    no remote atomics: made for switch-free PCIe boxes): does this stack have it, would it run here, is it on?"""
    f = allreduce_facts(c)
    b = pcie_ipc(f)
    line = pcie_ipc_line()
    env = line.serving.pcie_ipc_env if line else b.enable.split("=")[0]
    on = f.env.get(env, "").lower() in TRUTHY
    sg = (f"sglang {f.sglang}: {'has' if f.has_pcie_ipc else 'no'} pcie_ipc_ar backend" if f.sglang
          else "sglang: not installed")
    fi = ("flashinfer: not installed" if not f.flashinfer else
          f"flashinfer {f.flashinfer}: " + ("has" if f.flashinfer_pcie_ipc else "no" if f.flashinfer_pcie_ipc is False
                                           else "may have") + " PcieIpcAllReduceWorkspace")
    stack = f"{sg}; {fi}"
    data = {"usable": b.usable, "why": b.why, "enabled": on, "sglang_has_backend": f.has_pcie_ipc,
            "flashinfer_has_workspace": f.flashinfer_pcie_ipc, "tp": f.tp}
    if c.no_gpu or f.tp < 2:
        return item("pcie_ipc", "n/a", ("no GPU" if c.no_gpu else "TP=1: no all-reduce") + f"; {stack}",
                    data=data)
    if not b.usable:
        why = b.why
        install = (f"sglang-blackwell install --base {line.name} (sglang {line.package('sglang').version} + "
                   f"flashinfer {line.package('flashinfer').version})" if line else "no base line has it yet")
        fix = (install
               if not f.has_pcie_ipc or "flashinfer" in b.why else
               "run sglang at TP 2, 4 or 8" if "world size" in b.why else
               "enable P2P between the GPUs (see the p2p, iommu and acs items)")
        if on:
            return item("pcie_ipc", "warn", f"{env} is set but it cannot run: {why} ({stack})", fix, data)
        where = " (a PCIe-only box: the case it is made for)" if c.topo.pcie_only else ""
        return item("pcie_ipc", "info", f"not available: {why}{where}; {stack}; to get it: {fix}", data=data)
    if on:
        return item("pcie_ipc", "ok", f"on ({env}=1): decode-sized all-reduces at TP={f.tp} take it, "
                                      f"larger ones stay on NCCL; {stack}", data=data)
    hint = "made for PCIe-only boxes like this one" if c.topo.pcie_only else "made for PCIe-only boxes"
    return item("pcie_ipc", "info", f"available, off: export {env}=1 to opt in ({hint}; "
                                    "`sglang-blackwell bench allreduce --tune` measures whether it beats NCCL "
                                    f"here); {stack}", data=data)


def check_allreduce(c: Context) -> Check:
    facts = allreduce_facts(c)
    p = plan(facts)
    if c.no_gpu or facts.tp < 2:
        return item("allreduce_paths", "n/a", "no GPU" if c.no_gpu else "TP=1: no all-reduce", data=p)

    def row(r: dict) -> str:
        size = r["label"].split(" (")[0]
        path = f"fused AR+RMSNorm in layers, else {r['path']}" if r["fused_in_layers"] else r["path"]
        opt = f" [opt-in: {', '.join(r['opt_in_candidates'])}]" if r["opt_in_candidates"] else ""
        return f"{size}: {path}{opt}"

    detail = f"TP={facts.tp}: " + "; ".join(row(r) for r in p["by_size"])
    if not c.sglang:
        detail += " [sglang not installed: upstream 0.5.x defaults assumed]"
    return item("allreduce_paths", "info", detail, data=p)


SPLITKV_ENV = "SGLANG_ENABLE_SPLITKV_VERIFY"
WARMUP_ENV = "SGLANG_ENABLE_BATCH_SIZE_WARMUP"
SPLITKV_MAJORS = (9, 12)  # where P8's split-KV verify kernel is built and validated (the backend's gate)


def _env_off(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("0", "false", "no", "off")


def check_spec_verify(c: Context) -> Check:
    """What an EAGLE-3 server on this box does at long context: target-verify attention through the split-KV
    kernel (P8: MLA targets, topk 1, the triton attention backend, SM90/SM12x) or upstream's serial prefill
    kernel, and whether the server warms up what its first bursts would compile (P9)."""
    if c.sglang is None:
        return item("spec_verify", "n/a", "sglang is not installed here", INSTALL)
    patches = set(c.sglang.get("patches") or [])
    caps = c.topo.capabilities() or [TARGET_CAPABILITY]
    majors = {int(str(cap).split(".")[0]) for cap in caps}
    data = {"patches": sorted(patches & {"P8", "P9"}), "capabilities": list(caps),
            "env": {k: os.environ.get(k) for k in (SPLITKV_ENV, WARMUP_ENV)}}
    parts, fix, status = [], None, "ok"
    where = "this GPU" if not c.no_gpu else f"capability {TARGET_CAPABILITY} (the target; no GPU here)"
    if "P8" not in patches:
        parts.append(f"sglang {c.sglang['version']} has no split-KV target-verify on CUDA: verify attention walks "
                     "the whole prefix per head (EAGLE-3 ran at 0.52x the baseline at 2k tokens and 0.19x at 8k "
                     "on the lab)")
        fix, status = f"{INSTALL} (P8 is in the 0.5.14 and 0.5.23 lines)", "warn"
    elif _env_off(SPLITKV_ENV):
        parts.append(f"split-KV target-verify (P8) turned off by {SPLITKV_ENV}={os.environ[SPLITKV_ENV]}")
        status = "info"
    elif not majors & set(SPLITKV_MAJORS):
        parts.append(f"split-KV target-verify (P8) is off on capability {', '.join(map(str, caps))} (built and "
                     "validated for SM90 and SM12x)")
        status = "info"
    else:
        parts.append(f"split-KV target-verify (P8) on for {where}: MLA targets (DeepSeek-V3, Kimi-K2.x) at "
                     "--speculative-eagle-topk 1 with --attention-backend triton")
    if "P9" not in patches:
        parts.append("no first-use warm-up: the first concurrent burst after a start waits for kernels to compile "
                     "(~10 s on the lab)")
        fix, status = fix or f"{INSTALL} (P9 is in the 0.5.14 and 0.5.23 lines)", "warn"
    elif _env_off(WARMUP_ENV):
        parts.append(f"first-use warm-up (P9) turned off by {WARMUP_ENV}={os.environ[WARMUP_ENV]}")
        status = "info" if status == "ok" else status
    else:
        parts.append("first-use warm-up (P9) on: a 1024-token prefill and, with speculation, every batch-size "
                     "bucket before the server reports ready")
    return item("spec_verify", status, "; ".join(parts), fix, data)


CHECKS: tuple[Callable[[Context], Check], ...] = (
    check_gpus, check_driver, check_torch, check_nccl_version, check_fork_builds, check_trtllm,
    check_kernel_sass, check_p2p, check_multicast, check_links, check_iommu, check_acs, check_nccl_env,
    check_pcie_ipc, check_allreduce, check_spec_verify)


def check_arguments(*, tp: int | None = None, python: str | None = None, out: str | None = None) -> None:
    """doctor's options, before any check runs: bad input is exit 2 naming the option, not a report."""
    if tp is not None and tp < 1:
        raise UserError(f"--tp: expected a positive integer (the tensor-parallel size to plan for), got {tp}")
    if python is not None and shutil.which(python) is None:
        raise UserError(f"--python {python}: no such interpreter" + ("" if os.sep in python else " on PATH"))
    problem = output_problem(Path(out)) if out is not None else None
    if problem:
        raise UserError(f"--out {out}: {problem}")


def run_doctor(*, python: str | None = None, tp: int | None = None, topology: Topology | None = None,
               progress: Callable[[str], None] | None = None) -> Report:
    check_arguments(tp=tp, python=python)
    if progress:
        progress("topology ...")
    topo = topology if topology is not None else detect()
    if progress:
        progress("torch ...")
    ctx = Context(topo=topo, torch=torch_facts(), sglang=dist_facts("sglang"),
                  flashinfer=dist_facts("flashinfer-python"), python=python, tp=tp, progress=progress)
    checks = []
    for cid, fn in zip(CHECK_IDS, CHECKS, strict=True):
        try:
            checks.append(fn(ctx))
        except Exception as e:  # one odd machine must not kill the whole report: say which item broke
            checks.append(item(cid, "warn", f"this check crashed: {type(e).__name__}: {e}",
                               "report it with the output of `sglang-blackwell doctor --json`"))
    versions = {"sglang": ctx.sglang["version"] if ctx.sglang else None,
                "flashinfer": ctx.flashinfer["version"] if ctx.flashinfer else None,
                "torch": ctx.torch.get("version"), "cuda": ctx.torch.get("cuda"),
                "nccl": ctx.torch.get("nccl"), "driver": topo.driver}
    return Report(checks, topo, versions, tp or topo.gpu_count or None)


# ---- output -----------------------------------------------------------------------------------------------
def to_receipt(r: Report) -> dict[str, Any]:
    """The receipts envelope, kind "doctor": summary (small, comparable), then checks and topology."""
    summary = {"status": r.status(), "counts": {s: sum(c.status == s for c in r.checks) for s in STATUSES},
               "gpus": r.topology.gpu_count, "capability": "/".join(r.topology.capabilities()) or None,
               "topology_class": r.topology.topology_class(),
               "failing": [c.id for c in r.checks if c.status == "fail"],
               "warnings": [c.id for c in r.checks if c.status == "warn"]}
    return make_receipt("doctor", summary, tp=r.tp, machine=r.topology.machine(), versions=r.versions,
                        doctor_schema=SCHEMA, checks=[asdict(c) for c in r.checks],
                        topology=r.topology.to_dict())


def validate_doctor(receipt: dict[str, Any]) -> list[str]:
    """Problems with a doctor receipt's shape (empty: it matches SCHEMA)."""
    probs = validate_receipt(receipt)
    if receipt.get("kind") != "doctor":
        probs.append(f"kind is {receipt.get('kind')!r}, expected 'doctor'")
    if receipt.get("doctor_schema") != SCHEMA:
        probs.append(f"doctor_schema is {receipt.get('doctor_schema')!r}, expected {SCHEMA!r}")
    for k in ("status", "counts", "gpus", "capability", "topology_class", "failing", "warnings"):
        if k not in receipt.get("summary", {}):
            probs.append(f"summary lacks {k!r}")
    checks = receipt.get("checks", [])
    ids = [c.get("id") for c in checks]
    if tuple(ids) != CHECK_IDS:
        probs.append(f"check ids {ids} != {list(CHECK_IDS)}")
    for c in checks:
        if tuple(c) != CHECK_KEYS:
            probs.append(f"check {c.get('id')}: keys {list(c)} != {list(CHECK_KEYS)}")
        if c.get("status") not in STATUSES:
            probs.append(f"check {c.get('id')}: status {c.get('status')!r}")
        if c.get("status") in ("fail", "warn") and not c.get("fix"):
            probs.append(f"check {c.get('id')}: {c['status']} without a fix")
    for k in ("schema", "source", "class", "gpus", "links"):
        if k not in receipt.get("topology", {}):
            probs.append(f"topology lacks {k!r}")
    return probs


def format_report(r: Report) -> str:
    mark = {"ok": " ok ", "info": "info", "warn": "WARN", "fail": "FAIL", "n/a": "n/a "}
    t = r.topology
    lines = [f"sglang-blackwell doctor: {t.summary() if t.gpu_count else _no_gpu_headline(r)}"]
    if t.gpu_count == 0:
        lines.append("GPU items are n/a")
    w = max(len(c.id) for c in r.checks)
    pad = " " * (w + 9)
    for c in r.checks:
        lines.append(f"[{mark[c.status]}] {c.id.ljust(w)}  {c.detail}")
        if c.fix and c.status in ("warn", "fail"):
            lines.append(f"{pad}fix: {c.fix}")
        if c.id == "links":
            lines += [f"{pad}{row}" for row in c.data.get("matrix", [])]
    lines.append(f"overall: {overall(r)}")
    return "\n".join(lines)


def _no_gpu_headline(r: Report) -> str:
    s = next((c.data.get("sightings") for c in r.checks if c.id == "gpus"), None)
    seen = gpu_presence.gpus_seen(s) if s else {}
    if seen:
        return f"NVML sees no GPU, but {', '.join(f'{k} sees {n}' for k, n in seen.items())} (the gpus item says why)"
    return "no NVIDIA GPU on this machine (the gpus item says what was asked)"


def overall(r: Report) -> str:
    """The verdict in words, from the same status as the receipt's summary.status (fail / warn / ok)."""
    status = r.status()
    if status == "fail":
        return f"{OVERALL[status]} ({len(r.failed)} failing: {', '.join(c.id for c in r.failed)})"
    warned = [c.id for c in r.checks if c.status == "warn"]
    return f"{OVERALL[status]}, with {len(warned)} warning(s): {', '.join(warned)}" if warned else OVERALL[status]
