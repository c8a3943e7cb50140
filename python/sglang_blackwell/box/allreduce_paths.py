"""Which all-reduce path SGLang would take on this box, per message size: derived from the installed sglang
and flashinfer (read as files, never imported) plus the topology. Plain data, one rule per backend, so a new
backend or a new upstream version is one more entry.

Dispatch order in SGLang's GroupCoordinator (0.5.9 .. 0.5.23, `parallel_state.py`): custom all-reduce ->
PCIe-IPC (0.5.23+) -> mscclpp -> torch symm-mem -> NCCL. Separately, the FlashInfer fused
all-reduce + residual + RMSNorm replaces a layer's all-reduce for batches up to FUSE_ALLREDUCE_MAX_BATCH_SIZE
tokens. Server flags are not known here: opt-in backends are reported as "opt-in" with what they would need.
"""

from __future__ import annotations

import ast
import importlib.util
import operator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from ..patchset.bases import pcie_ipc_line
from . import sglang_env
from .allreduce_catalog import (
    PATH_CUSTOM_AR,
    PATH_FLASHINFER_FUSION,
    PATH_MSCCLPP,
    PATH_NCCL,
    PATH_PCIE_IPC,
    PATH_TORCH_SYMM_MEM,
)
from .sglang_env import BoolRule, Reading

MiB = 1 << 20
KiB = 1 << 10
# message sizes worth a row: an EAGLE-3 verify all-reduce on the target model is 3 tokens x 7168 x bf16
SIZES = ((4 * KiB, "4 KiB"), (43008, "42 KiB (EAGLE-3 verify: 3 tokens x 7168 hidden x bf16)"),
         (256 * KiB, "256 KiB"), (1 * MiB, "1 MiB"), (8 * MiB, "8 MiB"), (64 * MiB, "64 MiB"))
DEFAULT_CUSTOM_AR_MAX = 8 * MiB  # CustomAllreduce._MAX_CAR_SIZE (CUDA)
MSCCLPP_MAX = 1 * MiB  # SGLANG_MSCCLPP_MAX_BYTES default


@dataclass
class Facts:
    """Inputs of the plan. Every field may come from a real box or be simulated (tests, planning)."""

    tp: int
    capability: str | None  # "12.0"
    all_nvlink: bool = False
    all_p2p: bool | None = None
    all_native_atomics: bool | None = None
    multicast: bool | None = None
    sglang: str | None = None  # installed version
    sglang_patches: tuple[str, ...] = ()  # logical ids (P1..P7) from our wheel's marker
    flashinfer: str | None = None
    trtllm_comm_accepts: bool | None = None  # flashinfer's trtllm_comm JIT accepts this capability
    custom_ar_max: int = DEFAULT_CUSTOM_AR_MAX
    symm_mem_max: dict[int, dict[int, int]] = field(default_factory=dict)  # {major: {world: bytes}}
    has_pcie_ipc: bool = False  # sglang ships device_communicators/pcie_ipc_ar.py
    flashinfer_pcie_ipc: bool | None = None  # flashinfer ships PcieIpcAllReduceWorkspace (None: not looked)
    fusion_max_tokens: int | None = 2048
    fusion_flag: str = "--flashinfer-allreduce-fusion-backend trtllm"
    env: dict[str, str] = field(default_factory=dict)
    bool_rule: BoolRule | None = None  # how the installed sglang reads its switches (None: its base line's)
    hidden: int = 7168  # model hidden size (Kimi-K2.5, DeepSeek-V3): bf16 bytes -> tokens for fusion

    @property
    def major(self) -> int | None:
        return int(self.capability.split(".")[0]) if self.capability else None


@dataclass
class Backend:
    id: str  # one of allreduce_catalog.SGLANG_PATHS
    name: str
    mode: str  # "default" (taken when usable), "opt-in" (needs the flag/env in `enable`), "fallback"
    usable: bool | None  # would it work on this box with these versions (if turned on)?
    why: str
    max_bytes: int | None = None  # largest message it takes (None: any size)
    enable: str = ""  # how to turn it on, for opt-ins

    def fits(self, nbytes: int) -> bool:
        return bool(self.usable) and (self.max_bytes is None or nbytes <= self.max_bytes)

    def takes(self, nbytes: int) -> bool:
        """Taken by default (no server flags) for this message size."""
        return self.mode != "opt-in" and self.fits(nbytes)


def _ver(v: str | None) -> Version | None:
    try:
        return Version(v) if v else None
    except InvalidVersion:
        return None


def _set(b: Backend, usable: bool, why: str) -> Backend:
    b.usable, b.why = usable, why
    return b


def custom_allreduce(f: Facts) -> Backend:
    b = Backend(PATH_CUSTOM_AR, "sglang custom all-reduce (IPC, one-shot/two-shot)", "default", None, "",
                f.custom_ar_max)
    if f.tp > 2 and not f.all_nvlink:
        return _set(b, False, f"disabled: {f.tp} GPUs without full NVLink (sglang: 'not supported on more "
                              "than two PCIe-only GPUs')")
    if f.all_p2p is False:
        return _set(b, False, "disabled: no P2P access between the GPUs")
    why = "TP=2" if f.tp == 2 and not f.all_nvlink else "full NVLink"
    return _set(b, True, f"{why}, messages <= {_fmt(f.custom_ar_max)}")


def switch(f: Facts, name: str, default: bool) -> Reading:
    """A boolean switch of f.env as the installed sglang reads it (box/sglang_env.py; its base line's rule where
    the facts have none)."""
    env = sglang_env.installed(None, f.sglang) if f.bool_rule is None else sglang_env.SglangEnv(f.bool_rule, {})
    return env.read(name, default, f.env)


def pcie_ipc(f: Facts) -> Backend:
    line = pcie_ipc_line()
    since = f"sglang {line.package('sglang').version}+" if line else "no base line"
    env = line.serving.pcie_ipc_env if line else "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"
    numel = line.serving.pcie_ipc_max_numel_env if line else "SGLANG_PCIE_IPC_MAX_NUMEL"
    b = Backend(PATH_PCIE_IPC, f"FlashInfer PCIe-IPC all-reduce ({since})", "opt-in", None, "", None, f"{env}=1")
    fi = _ver(f.flashinfer)
    if not f.has_pcie_ipc:
        return _set(b, False, f"this sglang has no pcie_ipc_ar backend (upstream {since.removeprefix('sglang ')})")
    if f.flashinfer_pcie_ipc is False or (f.flashinfer_pcie_ipc is None and (fi is None or fi < Version("0.7.0"))):
        return _set(b, False, f"needs flashinfer >= 0.7.0 with PcieIpcAllReduceWorkspace (installed: "
                              f"{f.flashinfer or 'none'})")
    if f.tp not in (2, 4, 8):
        return _set(b, False, f"world size {f.tp} (needs 2, 4 or 8)")
    if f.all_p2p is False:
        return _set(b, False, "needs P2P access between the GPUs (CUDA IPC peer loads/stores)")
    r = switch(f, env, False)
    if not r.on:
        return _set(b, True, f"off: {r.text()}")
    b.mode = "default"
    return _set(b, True, f"enabled by {env}; bf16, up to its workspace "
                         f"(cuda-graph max bs x draft tokens x hidden, {numel})")


def mscclpp(f: Facts) -> Backend:
    b = Backend(PATH_MSCCLPP, "mscclpp one-shot LL (CUDA graph only)", "opt-in", None, "", MSCCLPP_MAX,
                "--enable-mscclpp")
    if f.tp not in (8, 16):
        return _set(b, False, f"world size {f.tp} (needs 8 or 16)")
    if f.all_p2p is False:
        return _set(b, False, "needs P2P access between the GPUs")
    return _set(b, True, f"would take messages <= {_fmt(MSCCLPP_MAX)} (untested on PCIe: benchmark first)")


def torch_symm_mem(f: Facts) -> Backend:
    b = Backend(PATH_TORCH_SYMM_MEM, "torch symmetric-memory all-reduce", "opt-in", None, "", None,
                "--enable-torch-symm-mem")
    table = f.symm_mem_max.get(f.major or -1)
    p6 = "P6" in f.sglang_patches
    no_multicast = f.multicast is not True
    if f.major is None:
        return _set(b, False, "no GPU")
    if table is None and not p6:
        return _set(b, False, f"sglang's TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES has no entry for capability "
                              f"{f.major} (patch P6 adds it)")
    if table is not None and f.tp not in table:
        return _set(b, False, f"world size {f.tp} not in sglang's table for capability {f.major}")
    if no_multicast and not p6:
        return _set(b, False, "needs multicast (sglang disables it when multicast_ptr == 0; patch P6 adds a "
                              "non-multicast path)")
    if no_multicast and f.all_native_atomics is not True:
        return _set(b, False, "the non-multicast path needs native P2P atomics (symm-mem barriers), which "
                              "these links do not report")
    b.max_bytes = table.get(f.tp) if table else None
    cap = _fmt(b.max_bytes) if b.max_bytes else "its size cap"
    return _set(b, True, f"would take messages < {cap}" + (" (non-multicast path, patch P6)" if no_multicast
                                                            else ""))


def fused_ar_norm(f: Facts) -> Backend:
    b = Backend(PATH_FLASHINFER_FUSION, "FlashInfer fused all-reduce + residual + RMSNorm (trtllm one-shot)",
                "default", None, "", None, f.fusion_flag)
    if f.major is None:
        return _set(b, False, "no GPU")
    if f.flashinfer is None:
        return _set(b, False, "flashinfer not installed")
    if f.trtllm_comm_accepts is False:
        return _set(b, False, f"flashinfer's trtllm_comm JIT rejects capability {f.capability} (patch P1 / "
                              "flashinfer >= 0.6.17)")
    if f.major in (9, 10):
        return _set(b, True, f"auto-enabled on SM{f.major}0 for supported models at TP>1, batches <= "
                             f"{f.fusion_max_tokens} tokens")
    if f.major == 12 and "P2" in f.sglang_patches:
        b.mode = "opt-in"
        return _set(b, True, f"opt-in on SM12x ({f.fusion_flag}; patch P2), never auto-enabled: TP4 on PCIe "
                             "regressed upstream (sglang PR #32330)")
    return _set(b, False, f"sglang's fusion gate allows SM90/SM100 only (capability {f.capability}; patch P2 "
                          "adds an SM12x opt-in)")


def nccl(f: Facts) -> Backend:
    return Backend(PATH_NCCL, "NCCL (pynccl inside CUDA graphs, torch.distributed otherwise)", "fallback", True,
                   "always available; the NCCL profile (`sglang-blackwell nccl show`) tunes it")


RULES = (custom_allreduce, pcie_ipc, mscclpp, torch_symm_mem, nccl)  # SGLang's dispatch order


def plan(f: Facts) -> dict[str, Any]:
    """{"facts", "backends" (dispatch order), "fusion", "by_size": [{bytes, label, path, opt_in}]}."""
    backends = [rule(f) for rule in RULES]
    fusion = fused_ar_norm(f)
    by_size = []
    for nbytes, label in SIZES:
        path = next(b for b in backends if b.takes(nbytes))
        opt = [b.id for b in backends if b.mode == "opt-in" and b.fits(nbytes)]
        tokens = nbytes // (2 * f.hidden)
        fused = (fusion.mode != "opt-in" and bool(fusion.usable) and tokens >= 1
                 and (f.fusion_max_tokens is None or tokens <= f.fusion_max_tokens))
        by_size.append({"bytes": nbytes, "label": label, "path": path.id, "opt_in_candidates": opt,
                        "tokens": tokens, "fused_in_layers": fused})
    return {"facts": asdict(f), "backends": [asdict(b) for b in backends], "fusion": asdict(fusion),
            "by_size": by_size}


def _fmt(n: int | None) -> str:
    if n is None:
        return "-"
    return f"{n // MiB} MiB" if n >= MiB and n % MiB == 0 else f"{n // KiB} KiB" if n % KiB == 0 else f"{n} B"


# ---- facts from installed files --------------------------------------------------------------------------
_OPS = {ast.Mult: operator.mul, ast.Add: operator.add, ast.Sub: operator.sub, ast.FloorDiv: operator.floordiv,
        ast.LShift: operator.lshift, ast.Pow: operator.pow}


def _eval_int(node: ast.AST, names: dict[str, Any]) -> Any:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_eval_int(node.left, names), _eval_int(node.right, names))
    if isinstance(node, ast.Dict):
        return {_eval_int(k, names): _eval_int(v, names) for k, v in zip(node.keys, node.values, strict=True)}
    raise ValueError(ast.dump(node))


def module_constants(path: Path, wanted: set[str]) -> dict[str, Any]:
    """Integer/dict constants assigned at module or class level in a Python file, without importing it."""
    try:
        tree = ast.parse(path.read_text())
    except (OSError, SyntaxError):
        return {}
    names: dict[str, Any] = {}
    out: dict[str, Any] = {}

    def visit(body):
        for node in body:
            if isinstance(node, ast.ClassDef):
                visit(node.body)
            elif (isinstance(node, ast.Assign) and len(node.targets) == 1
                  and isinstance(node.targets[0], ast.Name)):
                try:
                    val = _eval_int(node.value, names)
                except (ValueError, TypeError, KeyError):
                    continue
                names[node.targets[0].id] = val
                if node.targets[0].id in wanted and node.targets[0].id not in out:
                    out[node.targets[0].id] = val

    visit(tree.body)
    return out


def package_dir(name: str) -> Path | None:
    """Where a top-level package is installed, without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def flashinfer_facts(root: Path | None = None) -> dict[str, Any]:
    """What the installed flashinfer's own files say: does it have the PCIe-IPC all-reduce (>= 0.7.0)?"""
    root = root or package_dir("flashinfer")
    if root is None:
        return {}
    try:
        src = (root / "comm" / "pcie_ipc_ar.py").read_text()
    except OSError:
        return {"flashinfer_pcie_ipc": False}
    return {"flashinfer_pcie_ipc": "class PcieIpcAllReduceWorkspace" in src}


def sglang_facts(root: Path | None = None) -> dict[str, Any]:
    """What the installed sglang's own files say: custom AR max size, symm-mem table, PCIe-IPC presence,
    fusion limits and flag spelling."""
    root = root or package_dir("sglang")
    if root is None:
        return {}
    dc = root / "srt" / "distributed" / "device_communicators"
    out: dict[str, Any] = {"has_pcie_ipc": (dc / "pcie_ipc_ar.py").is_file()}
    car = module_constants(dc / "custom_all_reduce.py", {"_MAX_CAR_SIZE"})
    if "_MAX_CAR_SIZE" in car:
        out["custom_ar_max"] = car["_MAX_CAR_SIZE"]
    sm = module_constants(dc / "all_reduce_utils.py", {"TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"})
    if "TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES" in sm:
        out["symm_mem_max"] = sm["TORCH_SYMM_MEM_ALL_REDUCE_MAX_SIZES"]
    for rel in ("srt/layers/communicator.py", "srt/layers/layer_boundary/residual/add_norm.py"):
        c = module_constants(root / rel, {"FUSE_ALLREDUCE_MAX_BATCH_SIZE"})
        if c:
            out["fusion_max_tokens"] = c["FUSE_ALLREDUCE_MAX_BATCH_SIZE"]
            break
    try:
        args = (root / "srt" / "server_args.py").read_text()
    except OSError:
        args = ""
    if "flashinfer_allreduce_fusion_backend" not in args and "enable_flashinfer_allreduce_fusion" in args:
        out["fusion_flag"] = "--enable-flashinfer-allreduce-fusion"
    return out
