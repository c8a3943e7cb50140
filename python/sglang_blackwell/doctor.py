"""`sglang-blackwell doctor`: what works on this box and why not. Every item that fails or warns names its fix.

The items (ids are stable; the JSON lists all of them on every machine, `n/a` where they cannot apply):
  gpus, driver, torch, nccl_version, fork_builds, flashinfer_trtllm_comm, kernel_sass, p2p, multicast, links,
  iommu, acs, nccl_env, allreduce_paths
On a machine without an NVIDIA GPU it still runs, says so, and exits 0. Exit status 1 only when an item fails.
The software items look at the environment doctor runs in (its own interpreter); `--python` picks the
environment whose NCCL startup hook `nccl_env` inspects.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

from .allreduce_paths import Facts, package_dir, plan, sglang_facts
from .errors import UserError
from .fatbin import read_cuda_binary
from .receipts import make_receipt
from .topology import KIND_MEANING, Topology, detect
from .wheels import MARKER_FILE

SCHEMA = "sglang-blackwell/doctor/1"
STATUSES = ("ok", "info", "warn", "fail", "n/a")
CHECK_IDS = ("gpus", "driver", "torch", "nccl_version", "fork_builds", "flashinfer_trtllm_comm", "kernel_sass",
             "p2p", "multicast", "links", "iommu", "acs", "nccl_env", "allreduce_paths")
CHECK_KEYS = ("id", "title", "status", "detail", "fix", "data")
LOCAL_LABEL_RE = re.compile(r"\+(sm120\.\d+)$")
TARGET_CAPABILITY = "12.0"  # what the fork is for; reported where no GPU is present
KERNEL_DISTS = ("sglang-kernel", "sgl-kernel")


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


@dataclass
class Report:
    checks: list[Check]
    topology: Topology
    versions: dict[str, Any]
    tp: int | None

    @property
    def failed(self) -> list[Check]:
        return [c for c in self.checks if c.status == "fail"]

    def check(self, id: str) -> Check:
        return next(c for c in self.checks if c.id == id)

    def status(self) -> str:
        for s in ("fail", "warn"):
            if any(c.status == s for c in self.checks):
                return s
        return "ok"


# ---- facts ------------------------------------------------------------------------------------------------
def torch_facts() -> dict[str, Any]:
    """Version, CUDA build, arch list and NCCL of the torch in this interpreter (imports torch)."""
    out: dict[str, Any] = {"installed": False}
    try:
        import torch
    except Exception as e:  # ImportError, or a broken install raising anything at import
        out["error"] = f"{type(e).__name__}: {e}" if not isinstance(e, ModuleNotFoundError) else None
        return out
    out.update(installed=True, version=torch.__version__, cuda=torch.version.cuda, arch_list=[], nccl=None,
               cuda_available=False, device_count=0)
    try:
        out["cuda_available"] = bool(torch.cuda.is_available())
        out["device_count"] = torch.cuda.device_count() if out["cuda_available"] else 0
        archs = torch.cuda.get_arch_list() if out["cuda_available"] else []
        if not archs and torch.version.cuda:
            flags = getattr(torch._C, "_cuda_getArchFlags", lambda: None)()
            archs = flags.split() if flags else []
        out["arch_list"] = list(archs)
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {e}"
    try:
        v = torch.cuda.nccl.version()
        out["nccl"] = ".".join(map(str, v)) if isinstance(v, tuple) else str(v)
    except Exception:
        pass
    return out


def dist_facts(name: str) -> dict[str, Any] | None:
    """Installed distribution: version, our local label, our marker file (None: not installed)."""
    try:
        d = md.distribution(name)
    except md.PackageNotFoundError:
        return None
    version = d.version
    label = LOCAL_LABEL_RE.search(version)
    marker = None
    raw = d.read_text(MARKER_FILE)
    if raw:
        try:
            marker = json.loads(raw)
        except ValueError:
            marker = {"error": f"{MARKER_FILE} is not valid JSON"}
    return {"name": name, "version": version, "local_label": label[1] if label else None, "marker": marker,
            "patches": [p.get("logical_id") or p.get("name") for p in (marker or {}).get("patches", [])]}


def arch_covered(arch_list: list[str], major: int, minor: int) -> bool:
    """Does torch's arch list run on capability major.minor (SASS of the same major, minor <= ; or PTX <=)?"""
    for a in arch_list:
        m = re.fullmatch(r"(sm|compute)_(\d+)([af]?)", a)
        if not m:
            continue
        num, suf = int(m[2]), m[3]
        amaj, amin = num // 10, num % 10
        if suf == "a" and (amaj, amin) != (major, minor):
            continue
        if m[1] == "sm" and amaj == major and amin <= minor:
            return True
        if m[1] == "compute" and (amaj, amin) <= (major, minor) and (not suf or amaj == major):
            return True
    return False


def trtllm_comm_probe(capability: str, python: str = sys.executable, timeout: int = 120) -> dict[str, Any]:
    """Does the installed flashinfer's trtllm_comm JIT spec accept this capability? Builds the spec in a
    subprocess with FLASHINFER_CUDA_ARCH_LIST set to it (nothing is compiled; its workspace is a temp dir)."""
    major, minor = capability.split(".")
    arch = f"{major}.{minor}{'a' if int(major) >= 9 else ''}"
    script = (
        "import inspect, json, re\n"
        "out = {}\n"
        "try:\n"
        "    from flashinfer.jit.comm import gen_trtllm_comm_module\n"
        "except Exception as e:\n"
        "    print('SGLB ' + json.dumps({'importable': False, 'error': f'{type(e).__name__}: {e}'})); raise SystemExit\n"
        "try:\n"
        "    m = re.search(r'supported_major_versions=\\[([0-9, ]*)\\]', inspect.getsource(gen_trtllm_comm_module))\n"
        "    out['majors'] = [int(x) for x in m[1].split(',') if x.strip()] if m else None\n"
        "except Exception:\n"
        "    out['majors'] = None\n"
        "try:\n"
        "    gen_trtllm_comm_module(); out['accepted'] = True\n"
        "except RuntimeError as e:\n"
        "    out['accepted'] = False; out['error'] = str(e)\n"
        "print('SGLB ' + json.dumps(dict(out, importable=True)))\n")
    with tempfile.TemporaryDirectory(prefix="sglb-fi-") as ws:
        env = dict(os.environ, FLASHINFER_CUDA_ARCH_LIST=arch, FLASHINFER_WORKSPACE_BASE=ws)
        try:
            r = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=timeout, env=env)
        except subprocess.TimeoutExpired:
            return {"arch": arch, "importable": None, "error": f"timed out after {timeout} s"}
    line = next((ln for ln in r.stdout.splitlines() if ln.startswith("SGLB ")), None)
    if line is None:
        tail = (r.stderr.strip().splitlines() or ["no output"])[-1]
        return {"arch": arch, "importable": None, "error": f"exit {r.returncode}: {tail}"}
    return dict(json.loads(line[5:]), arch=arch)


def kernel_facts() -> dict[str, Any] | None:
    """The installed SGLang kernel package (sgl_kernel): its .so files and the SASS/PTX each holds."""
    root = package_dir("sgl_kernel")
    if root is None:
        return None
    dist = next((d for d in (dist_facts(n) for n in KERNEL_DISTS) if d), None)
    files = []
    for so in sorted(root.rglob("*.so")):
        try:
            b = read_cuda_binary(so)
            files.append(dict(b.to_dict(), path=str(so.relative_to(root))))
        except UserError as e:
            files.append({"path": str(so.relative_to(root)), "error": str(e)})
    return {"root": str(root), "dist": dist, "files": files}


def iommu_facts(topo: Topology, sys_root: Path = Path("/")) -> dict[str, Any]:
    iommu_dir = sys_root / "sys/class/iommu"
    units = sorted(p.name for p in iommu_dir.iterdir()) if iommu_dir.is_dir() else []
    try:
        cmdline = (sys_root / "proc/cmdline").read_text().split()
    except OSError:
        cmdline = []
    relevant = [t for t in cmdline if re.match(r"(intel_iommu|amd_iommu|iommu|iommu\.passthrough|pcie_acs_override)"
                                               r"(=|$)", t)]
    groups = {}
    for g in topo.gpus:
        try:
            groups[g.pci_bus_id] = (sys_root / f"sys/bus/pci/devices/{g.pci_bus_id}/iommu_group/type").read_text().strip()
        except OSError:
            groups[g.pci_bus_id] = None
    try:
        hmm = (sys_root / "sys/module/nvidia_uvm/parameters/uvm_disable_hmm").read_text().strip()
    except OSError:
        hmm = None
    return {"units": units, "cmdline": relevant, "gpu_domain_types": groups, "uvm_disable_hmm": hmm}


_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")


def upstream_bridges(bus_id: str, sys_root: Path = Path("/")) -> list[str]:
    """PCI bridges between the root complex and a device, from its sysfs path."""
    real = os.path.realpath(sys_root / f"sys/bus/pci/devices/{bus_id}")
    return [p for p in Path(real).parts if _BDF.match(p) and p != bus_id]


def parse_lspci_acs(text: str) -> dict[str, dict[str, Any]]:
    """`lspci -D -vvv` -> {bdf: {"name", "acs_ctl": {flag: bool} | None, "denied": bool}}."""
    out = {}
    for block in re.split(r"\n(?=[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7] )", text.strip()):
        first = block.split("\n", 1)[0]
        m = re.match(r"([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (.*)", first)
        if not m:
            continue
        ctl = re.search(r"ACSCtl:\s*(.*)", block)
        flags = {f[:-1]: f.endswith("+") for f in ctl[1].split() if f[-1] in "+-"} if ctl else None
        out[m[1]] = {"name": m[2], "acs_ctl": flags, "denied": "<access denied>" in block}
    return out


def acs_facts(topo: Topology, sys_root: Path = Path("/"), lspci: str | None = None) -> dict[str, Any]:
    bridges = sorted({b for g in topo.gpus for b in upstream_bridges(g.pci_bus_id, sys_root)})
    if lspci is None:
        exe = shutil.which("lspci")
        if exe is None:
            return {"lspci": None, "bridges": bridges, "redirecting": []}
        try:
            lspci = subprocess.run([exe, "-D", "-vvv"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.TimeoutExpired):
            return {"lspci": None, "bridges": bridges, "redirecting": []}
    devs = parse_lspci_acs(lspci)
    redirecting = [b for b in bridges if (devs.get(b, {}).get("acs_ctl") or {}).get("ReqRedir")
                   or (devs.get(b, {}).get("acs_ctl") or {}).get("CmpltRedir")]
    denied = [b for b in bridges if devs.get(b, {}).get("denied")]
    return {"lspci": True, "bridges": bridges, "redirecting": redirecting, "denied": denied,
            "with_acs": [b for b in bridges if devs.get(b, {}).get("acs_ctl") is not None]}


# ---- checks -----------------------------------------------------------------------------------------------
@dataclass
class Context:
    topo: Topology
    torch: dict[str, Any]
    sglang: dict[str, Any] | None
    flashinfer: dict[str, Any] | None
    python: str | None
    tp: int | None
    progress: Callable[[str], None] | None = None
    trtllm: dict[str, Any] | None = None

    @property
    def no_gpu(self) -> bool:
        return self.topo.gpu_count == 0

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)


def check_gpus(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return Check("gpus", "GPUs", "n/a", f"no NVIDIA GPU found ({'; '.join(t.notes) or 'NVML found none'}): "
                     "the GPU items below are n/a", data=t.machine())
    caps = t.capabilities()
    archs = sorted({g.arch for g in t.gpus})
    target = any(g.major == 12 for g in t.gpus)
    detail = f"{t.summary()}; arch {', '.join(archs)}"
    if not target:
        detail += f" (this fork targets capability 12.x; {'/'.join(caps)} runs the upstream paths)"
    return Check("gpus", "GPUs", "ok", detail, data=dict(t.machine(), archs=archs, simulated=t.is_simulated))


def check_driver(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return Check("driver", "driver", "n/a", "no GPU")
    detail = f"driver {t.driver}, supports CUDA up to {t.cuda_driver or 'unknown'}"
    tc = c.torch.get("cuda")
    if tc and t.cuda_driver and _vt(tc) > _vt(t.cuda_driver):
        return Check("driver", "driver", "fail", detail + f"; torch is built for CUDA {tc}",
                     f"install an NVIDIA driver that supports CUDA {tc} (CUDA 13.0 needs 580 or newer), or a torch "
                     f"build for CUDA <= {t.cuda_driver}", {"driver": t.driver, "cuda_driver": t.cuda_driver})
    return Check("driver", "driver", "ok", detail, data={"driver": t.driver, "cuda_driver": t.cuda_driver})


def _vt(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:2])


def check_torch(c: Context) -> Check:
    tf = c.torch
    if not tf.get("installed"):
        return Check("torch", "torch", "warn" if not c.no_gpu else "n/a",
                     "torch is not installed in this environment" + (f" ({tf['error']})" if tf.get("error") else ""),
                     "sglang-blackwell install (brings the base's CUDA torch)", tf)
    archs = tf.get("arch_list") or []
    has120 = any(a.startswith(("sm_120", "compute_120")) for a in archs)
    detail = (f"torch {tf['version']} (CUDA {tf.get('cuda') or 'none: CPU build'}), arch list "
              f"{' '.join(archs) or 'empty'}; sm_120 in it: {'yes' if has120 else 'no'}")
    data = dict(tf, sm_120=has120)
    if c.no_gpu:
        return Check("torch", "torch", "info", detail, data=data)
    if not tf.get("cuda"):
        return Check("torch", "torch", "fail", detail, "install a CUDA build of torch: sglang-blackwell install",
                     data)
    missing = sorted({g.arch for g in c.topo.gpus if not arch_covered(archs, g.major, g.minor)})
    if archs and missing:
        return Check("torch", "torch", "fail", detail + f"; no kernels for {', '.join(missing)}",
                     "install a torch built for this GPU (CUDA 12.8+ / cu130 wheels include sm_120): "
                     "sglang-blackwell install", data)
    if not tf.get("cuda_available"):
        return Check("torch", "torch", "fail", detail + f"; torch.cuda.is_available() is False ({tf.get('error')})",
                     "check the driver and CUDA_VISIBLE_DEVICES; `nvidia-smi` must list the GPUs", data)
    return Check("torch", "torch", "ok", detail, data=data)


def check_nccl_version(c: Context) -> Check:
    dists = {n: d["version"] for n in ("nvidia-nccl-cu13", "nvidia-nccl-cu12") if (d := dist_facts(n))}
    v = c.torch.get("nccl")
    data = {"torch_nccl": v, "wheels": dists}
    if not c.torch.get("installed"):
        return Check("nccl_version", "NCCL", "n/a", "torch not installed", data=data)
    if v is None:
        return Check("nccl_version", "NCCL", "n/a" if c.no_gpu else "warn",
                     "this torch has no NCCL (CPU build)" if not c.torch.get("cuda") else "NCCL version unknown",
                     None if c.no_gpu else "install a CUDA build of torch: sglang-blackwell install", data)
    wheels = ", ".join(f"{k} {w}" for k, w in dists.items())
    return Check("nccl_version", "NCCL", "ok", f"NCCL {v} (torch)" + (f"; {wheels}" if wheels else ""), data=data)


def check_fork_builds(c: Context) -> Check:
    parts, status, fix = [], "ok", None
    data = {"sglang": c.sglang, "flashinfer": c.flashinfer}
    if c.sglang is None and c.flashinfer is None:
        return Check("fork_builds", "this fork's sglang/flashinfer builds", "n/a",
                     "neither sglang nor flashinfer-python is installed here", "sglang-blackwell install", data)
    for label, d in (("sglang", c.sglang), ("flashinfer-python", c.flashinfer)):
        if d is None:
            parts.append(f"{label}: not installed")
            status = "warn"
            fix = "sglang-blackwell install"
        elif d["marker"] and d["local_label"]:
            m = d["marker"]
            parts.append(f"{label} {d['version']}: this fork (base {m.get('base')}, patches "
                         f"{', '.join(p for p in d['patches'] if p) or 'none'})")
        elif d["local_label"]:
            parts.append(f"{label} {d['version']}: carries our label but no {MARKER_FILE}")
            status, fix = "warn", "reinstall the patched wheels: sglang-blackwell install"
        else:
            parts.append(f"{label} {d['version']}: upstream build (none of this fork's patches)")
            status, fix = "warn", "sglang-blackwell install (patched wheels; `--upstream` rolls back)"
    return Check("fork_builds", "this fork's sglang/flashinfer builds", status, "; ".join(parts), fix, data)


def check_trtllm(c: Context) -> Check:
    title = "flashinfer trtllm_comm JIT (fused all-reduce) accepts this capability"
    if c.flashinfer is None:
        return Check("flashinfer_trtllm_comm", title, "n/a", "flashinfer-python not installed")
    caps = c.topo.capabilities() or [TARGET_CAPABILITY]
    results = {}
    for cap in caps:
        c.say(f"flashinfer trtllm_comm for capability {cap} ...")
        results[cap] = trtllm_comm_probe(cap)
    c.trtllm = results
    bad = [cap for cap, r in results.items() if r.get("accepted") is False]
    unknown = [cap for cap, r in results.items() if r.get("accepted") is None]
    majors = next((r.get("majors") for r in results.values() if r.get("majors")), None)
    detail = "; ".join(f"capability {cap} ({r['arch']}): " + (
        "accepted" if r.get("accepted") else f"rejected: {r.get('error')}" if r.get("accepted") is False
        else f"could not tell: {r.get('error')}") for cap, r in results.items())
    if majors:
        detail += f"; its arch table: majors {majors}"
    fix = ("install this fork's flashinfer (patch P1): sglang-blackwell install; or flashinfer-python >= 0.6.17, "
           "which lists major 12")
    if c.no_gpu:
        return Check("flashinfer_trtllm_comm", title, "n/a", f"no GPU; for the target {detail}", None, results)
    if bad:
        return Check("flashinfer_trtllm_comm", title, "warn", detail + " (only matters with all-reduce fusion on)",
                     fix, results)
    if unknown:
        return Check("flashinfer_trtllm_comm", title, "warn", detail,
                     "make `python -c 'import flashinfer.jit.comm'` work in this environment", results)
    return Check("flashinfer_trtllm_comm", title, "ok", detail, data=results)


def check_kernel_sass(c: Context) -> Check:
    title = "SGLang kernel wheel has SASS for this GPU"
    k = kernel_facts()
    if k is None:
        return Check("kernel_sass", title, "n/a", "sgl_kernel is not installed here", "sglang-blackwell install", {})
    dist = k["dist"]
    name = f"{dist['name']} {dist['version']}" if dist else "sgl_kernel"
    caps = [(g.major, g.minor) for g in c.topo.gpus] or [(12, 0)]
    arch_txt = "/".join(sorted({f"sm_{ma}{mi}" for ma, mi in caps}))
    lines, missing_core = [], []
    from .fatbin import Arch

    for f in k["files"]:
        if "error" in f:
            lines.append(f"{f['path']}: {f['error']}")
            continue
        sass = [Arch(int(re.sub(r"\D", "", s)), s[-1] if s[-1] in "af" else "") for s in f["sass"]]
        ok = all(any(a.runs_on(ma, mi) for a in sass) for ma, mi in caps)
        lines.append(f"{f['path']}: {' '.join(f['sass']) or 'no SASS'}{' + PTX ' + ' '.join(f['ptx']) if f['ptx'] else ''}"
                     f" -> {arch_txt}: {'yes' if ok else 'NO'}")
        f["runs_here"] = ok
        if "common_ops" in f["path"] and not ok:
            missing_core.append(f["path"])
    core = [f for f in k["files"] if "common_ops" in f["path"] and "error" not in f]
    detail = f"{name} at {k['root']}: " + "; ".join(lines)
    data = dict(k, gpu_archs=arch_txt)
    if c.no_gpu:
        return Check("kernel_sass", title, "n/a", f"no GPU; for the target {TARGET_CAPABILITY}: {detail}", None, data)
    if core and all(f["path"] in missing_core for f in core):
        return Check("kernel_sass", title, "fail", detail,
                     "install the kernel wheel the base pins (cu130 build with sm_120a), or build it from "
                     "sgl-kernel/ for sm_120a", data)
    return Check("kernel_sass", title, "ok", detail, data=data)


def check_p2p(c: Context) -> Check:
    t = c.topo
    if t.gpu_count < 2:
        return Check("p2p", "P2P access and native atomics per GPU pair", "n/a",
                     "no GPU" if c.no_gpu else "one GPU: no pairs")
    rows = [{"pair": [lk.a, lk.b], "kind": lk.kind, "p2p": lk.p2p, "native_atomics": lk.native_atomics,
             "nvml": {"read": lk.p2p_read, "write": lk.p2p_write, "atomics": lk.p2p_atomics},
             "cuda": {"access": lk.cuda_p2p_access, "native_atomics": lk.cuda_native_atomics}} for lk in t.links]
    no_p2p = [f"{lk.a}-{lk.b}" for lk in t.links if lk.p2p is False]
    no_atom = [f"{lk.a}-{lk.b}" for lk in t.links if lk.native_atomics is False]
    unknown = [f"{lk.a}-{lk.b}" for lk in t.links if lk.p2p is None]
    detail = (f"P2P: {'all pairs' if not no_p2p and not unknown else 'missing for ' + ', '.join(no_p2p) if no_p2p else 'unknown for ' + ', '.join(unknown)}; "
              f"native atomics: {'all pairs' if not no_atom and t.all_native_atomics else 'none on ' + ', '.join(no_atom) if no_atom else 'unknown'}")
    if no_atom:
        detail += " (torch symm-mem barriers need them: that path stays off here; NCCL and PCIe-IPC do not)"
    data = {"pairs": rows}
    if no_p2p:
        return Check("p2p", "P2P access and native atomics per GPU pair", "warn", detail,
                     "P2P off makes NCCL stage through host memory and disables custom/IPC all-reduce: check the "
                     "iommu and acs items; GeForce cards need a driver that exposes P2P", data)
    return Check("p2p", "P2P access and native atomics per GPU pair", "ok" if not unknown else "info", detail,
                 data=data)


def check_multicast(c: Context) -> Check:
    if c.no_gpu:
        return Check("multicast", "multicast (NVLS / symm-mem multimem)", "n/a", "no GPU")
    per = {g.index: g.multicast for g in c.topo.gpus}
    m = c.topo.multicast
    word = {True: "supported on every GPU", False: "not supported", None: "unknown (CUDA driver not queried)"}[m]
    return Check("multicast", "multicast (NVLS / symm-mem multimem)", "info",
                 f"CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED: {word}" + (
                     "; sglang's multimem / NVLS paths stay off" if m is False else ""),
                 data={"per_gpu": per, "all": m})


def check_links(c: Context) -> Check:
    t = c.topo
    if c.no_gpu:
        return Check("links", "link topology", "n/a", "no GPU")
    numa = {g.index: g.numa_node for g in t.gpus}
    pcie = {g.index: {"gen": g.pcie_gen, "width": g.pcie_width, "max_gen": g.pcie_max_gen,
                      "max_width": g.pcie_max_width} for g in t.gpus}
    narrow = [f"GPU{g.index} x{g.pcie_width} of x{g.pcie_max_width}" for g in t.gpus
              if g.pcie_width and g.pcie_max_width and g.pcie_width < g.pcie_max_width]
    kinds = ", ".join(f"{k} x{n} ({KIND_MEANING.get('NV' if k.startswith('NV') else k, k)})"
                      for k, n in t.link_counts().items()) or "one GPU"
    detail = f"{kinds}; NUMA nodes {sorted({n for n in numa.values() if n is not None}) or 'unknown'}"
    data = {"matrix": t.matrix(), "counts": t.link_counts(), "numa": numa, "pcie": pcie}
    if narrow:
        return Check("links", "link topology", "warn", detail + f"; PCIe link narrower than the slot: {', '.join(narrow)}",
                     "reseat the card / check the riser and the BIOS PCIe bifurcation settings", data)
    return Check("links", "link topology", "ok", detail, data=data)


def check_iommu(c: Context) -> Check:
    if c.topo.is_simulated:
        return Check("iommu", "IOMMU (platform hazard for PCIe P2P)", "n/a",
                     f"simulated topology ({c.topo.source}): this host's IOMMU says nothing about it")
    f = iommu_facts(c.topo)
    translated = [b for b, typ in f["gpu_domain_types"].items() if typ and typ.upper().startswith("DMA")]
    on = bool(f["units"])
    detail = (f"IOMMU {'enabled (' + ', '.join(f['units']) + ')' if on else 'not active'}; kernel cmdline: "
              f"{' '.join(f['cmdline']) or '(no iommu options)'}; GPU DMA domains: "
              f"{', '.join(f'{b}={t}' for b, t in f['gpu_domain_types'].items()) or 'n/a'}; nvidia_uvm "
              f"uvm_disable_hmm={f['uvm_disable_hmm'] or 'n/a'}")
    if c.no_gpu:
        return Check("iommu", "IOMMU (platform hazard for PCIe P2P)", "n/a", "no GPU; " + detail, data=f)
    if translated and c.topo.pcie_only:
        return Check("iommu", "IOMMU (platform hazard for PCIe P2P)", "warn",
                     detail + f"; {len(translated)} GPU(s) behind a translating IOMMU: PCIe P2P can hang or slow "
                     "down (NCCL troubleshooting; seen on RTX PRO 6000 boxes)",
                     "boot with iommu=pt (Intel: intel_iommu=on iommu=pt; AMD: amd_iommu=on iommu=pt) or turn the "
                     "IOMMU off in the BIOS; if P2P still hangs, try nvidia_uvm uvm_disable_hmm=1", f)
    return Check("iommu", "IOMMU (platform hazard for PCIe P2P)", "ok" if not translated else "info", detail,
                 data=f)


def check_acs(c: Context) -> Check:
    title = "ACS on PCIe bridges above the GPUs (platform hazard for PCIe P2P)"
    if c.no_gpu:
        return Check("acs", title, "n/a", "no GPU")
    if c.topo.is_simulated:
        return Check("acs", title, "n/a", f"simulated topology ({c.topo.source}): no PCIe bridges to read")
    f = acs_facts(c.topo)
    if f["lspci"] is None:
        return Check("acs", title, "n/a", f"lspci not available; {len(f['bridges'])} bridge(s) above the GPUs",
                     "apt-get install pciutils (and run doctor as root) to check ACS", f)
    if f.get("denied"):
        return Check("acs", title, "n/a", f"lspci cannot read the capabilities of {', '.join(f['denied'])}",
                     "run doctor as root to read ACS", f)
    if f["redirecting"] and c.topo.gpu_count > 1 and not c.topo.all_nvlink:
        return Check("acs", title, "warn",
                     f"ACS redirects peer traffic to the root complex on {', '.join(f['redirecting'])}: GPU P2P "
                     "through these switches is slow or hangs",
                     "disable ACS in the BIOS, or per bridge at boot: setpci -s <bridge> ECAP_ACS+6.w=0000 "
                     "(NCCL troubleshooting guide)", f)
    return Check("acs", title, "ok", f"{len(f['bridges'])} bridge(s) above the GPUs, "
                 f"{len(f['with_acs'])} with ACS, none redirecting P2P", data=f)


def check_nccl_env(c: Context) -> Check:
    from .nccl import load_profiles, resolve
    from .sitehook import state

    title = "NCCL environment in effect (and the managed block)"
    try:
        profiles = load_profiles()
        st = state(c.python, profiles=profiles)
    except UserError as e:
        return Check("nccl_env", title, "warn", str(e), "sglang-blackwell nccl show --python <interpreter>")
    env = "; ".join(f"{r['key']}={r['value'] or '-'} ({r['source']})" for r in st["env"]) or "no NCCL_* set"
    act = st["active"]
    cls = c.topo.topology_class()
    auto = resolve("auto", c.topo, profiles)
    status, fix, extra = "ok", None, ""
    if act:
        extra = f"managed block: profile {act['profile']} via {act['hook']} (resolved for {act['class']})"
        prof = profiles.get(act["profile"])
        if act["class"] != cls:
            status, fix = "warn", "sglang-blackwell nccl install --profile auto (re-resolves for this hardware)"
            extra += f"; this machine is now {cls!r}: the block no longer matches the hardware"
        elif prof is not None and not prof.fits_class(cls):
            status, fix = "warn", f"sglang-blackwell nccl install --profile {auto.profile.name}"
            extra += f"; profile {act['profile']} is not meant for {cls!r}"
    else:
        extra = "no managed block"
        if cls == "pcie":
            status, fix = "warn", "sglang-blackwell nccl install (auto picks pcie-ll on PCIe-only boxes)"
            extra += f" on a {cls} box ({auto.reason})"
    if st["problems"]:
        status, fix = "warn", fix or "sglang-blackwell nccl install"
        extra += "; " + "; ".join(st["problems"])
    return Check("nccl_env", title, status, f"{extra}; {env}", fix, st)


def check_allreduce(c: Context) -> Check:
    title = "all-reduce path per message size (patched SGLang, no server flags)"
    t = c.topo
    tp = c.tp or t.gpu_count
    cap = t.capabilities()[0] if t.gpus else None
    sf = sglang_facts()
    tr = c.trtllm or {}
    accepts = tr.get(cap, {}).get("accepted") if cap else None
    facts = Facts(tp=tp, capability=cap, all_nvlink=t.all_nvlink, all_p2p=t.all_p2p,
                  all_native_atomics=t.all_native_atomics, multicast=t.multicast,
                  sglang=c.sglang["version"] if c.sglang else None,
                  sglang_patches=tuple(p for p in (c.sglang or {}).get("patches", []) if p),
                  flashinfer=c.flashinfer["version"] if c.flashinfer else None, trtllm_comm_accepts=accepts,
                  env={k: v for k, v in os.environ.items() if k.startswith("SGLANG_")}, **sf)
    p = plan(facts)
    if c.no_gpu or tp < 2:
        return Check("allreduce_paths", title, "n/a", "no GPU" if c.no_gpu else "TP=1: no all-reduce", data=p)
    rows = "; ".join(f"{r['label'].split(' (')[0]}: " + (f"fused AR+RMSNorm in layers, else {r['path']}"
                                                        if r["fused_in_layers"] else r["path"])
                     + (f" [opt-in: {', '.join(r['opt_in_candidates'])}]" if r["opt_in_candidates"] else "")
                     for r in p["by_size"])
    if not c.sglang:
        rows += " [sglang not installed: upstream defaults assumed]"
    return Check("allreduce_paths", title, "info", f"TP={tp}: {rows}", data=p)


CHECKS: tuple[Callable[[Context], Check], ...] = (
    check_gpus, check_driver, check_torch, check_nccl_version, check_fork_builds, check_trtllm, check_kernel_sass,
    check_p2p, check_multicast, check_links, check_iommu, check_acs, check_nccl_env, check_allreduce)


def run_doctor(*, python: str | None = None, tp: int | None = None, topology: Topology | None = None,
               progress: Callable[[str], None] | None = None) -> Report:
    if progress:
        progress("topology ...")
    topo = topology if topology is not None else detect()
    if progress:
        progress("torch ...")
    ctx = Context(topo=topo, torch=torch_facts(), sglang=dist_facts("sglang"),
                  flashinfer=dist_facts("flashinfer-python"), python=python, tp=tp, progress=progress)
    checks = []
    for fn in CHECKS:
        try:
            checks.append(fn(ctx))
        except Exception as e:  # a doctor must not die on one odd machine; say which item broke
            cid = fn.__name__.removeprefix("check_")
            cid = {"trtllm": "flashinfer_trtllm_comm", "allreduce": "allreduce_paths"}.get(cid, cid)
            checks.append(Check(cid, cid, "warn", f"this check crashed: {type(e).__name__}: {e}",
                                "report it with the output of `sglang-blackwell doctor --json`"))
    versions = {"sglang": ctx.sglang["version"] if ctx.sglang else None,
                "flashinfer": ctx.flashinfer["version"] if ctx.flashinfer else None,
                "torch": ctx.torch.get("version"), "cuda": ctx.torch.get("cuda"), "nccl": ctx.torch.get("nccl"),
                "driver": topo.driver}
    return Report(checks, topo, versions, tp or topo.gpu_count or None)


def to_receipt(r: Report) -> dict[str, Any]:
    counts = {s: sum(1 for c in r.checks if c.status == s) for s in STATUSES}
    summary = {"status": r.status(), "counts": counts, "gpus": r.topology.gpu_count,
               "capability": "/".join(r.topology.capabilities()) or None,
               "topology_class": r.topology.topology_class(),
               "failing": [c.id for c in r.checks if c.status == "fail"],
               "warnings": [c.id for c in r.checks if c.status == "warn"]}
    return make_receipt("doctor", summary, tp=r.tp, machine=r.topology.machine(), versions=r.versions,
                        doctor_schema=SCHEMA, checks=[asdict(c) for c in r.checks], topology=r.topology.to_dict())


def validate_doctor(receipt: dict[str, Any]) -> list[str]:
    """Problems with a doctor receipt's shape (empty: it matches SCHEMA)."""
    from .receipts import validate_receipt

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
    lines = [f"sglang-blackwell doctor: {r.topology.summary()}"]
    if r.topology.gpu_count == 0:
        lines.append("no NVIDIA GPU on this machine: GPU items are n/a")
    w = max(len(c.id) for c in r.checks)
    for c in r.checks:
        lines.append(f"[{mark[c.status]}] {c.id.ljust(w)}  {c.detail}")
        if c.fix and c.status in ("warn", "fail"):
            lines.append(f"       {''.ljust(w)}  fix: {c.fix}")
        if c.id == "links" and c.data.get("matrix"):
            lines += [f"       {''.ljust(w)}  {row}" for row in c.data["matrix"]]
    lines.append(f"overall: {r.status()}" + (f" ({len(r.failed)} failing)" if r.failed else ""))
    return "\n".join(lines)
