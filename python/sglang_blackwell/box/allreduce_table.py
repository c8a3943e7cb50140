"""The per-topology all-reduce dispatch table: which backend is fastest, and correct, for which message size.

`bench allreduce --tune` builds one entry per (GPU name, capability, TP size, link type) from a measurement;
`knobs_from_table` turns an entry into the upstream-style knobs a (P7-patched) sglang reads. Plain data and
pure functions: nothing here touches a GPU.

    {"schema": "sglang-blackwell/allreduce-table/1",
     "entries": {"NVIDIA H200|sm90|tp2|nvlink": {
         "gpu_name", "capability", "world_size", "link", "hidden", "dtype", "elem_size", "tokens", "tie_rel",
         "created", "source",
         "ops": {"ar_rmsnorm" | "ar": {"latency_us": {backend: {T: us}}, "excluded": {backend: why},
                                      "ranges": [{"tokens": [lo, hi], "bytes": [lo, hi], "backend": name}]}},
         "nccl_profiles": {profile: {"nccl": {T: us}, "nccl_norm": {T: us}}}}}}

Operations are compared only with themselves: AR+residual+RMSNorm ("ar_rmsnorm") with AR+residual+RMSNorm,
AR-only ("ar") with AR-only. A backend that failed any numerics check is excluded from its operation.
Ranges cover token counts 1..max measured: a range ends at the last measured size its backend won, the next
range starts right after it, so sizes between two measurements get the backend of the larger one.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UserError
from ..patchset.bases import Base, list_bases
from ..paths import write_atomic
from .allreduce_catalog import OPS, PREFERENCE
from .topology import Topology

SCHEMA = "sglang-blackwell/allreduce-table/1"
DEFAULT_TIE_REL = 0.03  # within 3% of the fastest, the more conservative backend wins

# FlashInfer's own one-shot/two-shot pick when sglang passes use_oneshot=None: one-shot while
# token_num * hidden * 2 * world_size * itemsize / MiB <= this (flashinfer.comm.trtllm_ar
# `_use_oneshot_heuristics`, identical in 0.6.4, 0.6.12 and 0.7.2).
FI_ONESHOT_MAX_MIB = {2: 512, 4: 64, 8: 42}

ENV_SYMM_MAX = "SGLANG_TORCH_SYMM_MEM_MAX_SIZE"
ENV_SYMM_ONESHOT_MAX = "SGLANG_TORCH_SYMM_MEM_ONESHOT_MAX_SIZE"
ENV_FUSION_MAX_TOKENS = "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS"
# The server flags (fusion on / off) and the PCIe-IPC all-reduce's variables of each sglang line are base.toml
# [serving] facts (patchset/bases.py). A line without a fusion-off flag (0.5.9) leaves the "on" flag out (on
# SM90/SM100 0.5.9 auto-enables fusion for DeepSeek-V3-class models; the P7 env knob
# SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS=0 turns it off on every line).
SYMM_MEM_FLAG = "--enable-torch-symm-mem"


# ----------------------------------------------------------------------------------------------- keys

@dataclass(frozen=True)
class TopologyKey:
    gpu_name: str
    capability: str  # "9.0", "12.0"
    world_size: int
    link: str  # "nvlink" | "pcie" | "unknown"

    def key(self) -> str:
        return f"{self.gpu_name}|sm{self.capability.replace('.', '')}|tp{self.world_size}|{self.link}"


def topology_key(topology: Topology, tp: int) -> TopologyKey:
    """Key for `tp` GPUs of this machine."""
    if not topology.gpus:
        raise UserError(f"no GPU in the topology ({topology.summary()}): there is no table entry to look up")
    m = topology.machine()
    return TopologyKey(str(m["gpu_name"]), str(m["capability"]), int(tp), topology.link_kind)


def facts_key(facts: Mapping[str, Any], tp: int) -> TopologyKey:
    """Key for `tp` GPUs described by a bench receipt's `meta.topology` facts (gpu_name, capability, link)."""
    name, cap, link = (facts.get(k) for k in ("gpu_name", "capability", "link"))
    if not name or cap is None:
        raise UserError(f"topology lacks gpu_name/capability: {dict(facts)!r}")
    if isinstance(cap, (tuple, list)):
        cap = ".".join(str(c) for c in cap)
    return TopologyKey(str(name), str(cap), int(tp), str(link or "unknown"))


# ------------------------------------------------------------------------------------ choosing winners

def _pref_rank(name: str) -> tuple[int, str]:
    return (PREFERENCE.index(name) if name in PREFERENCE else len(PREFERENCE), name)


def pick_fastest(latency_at_t: Mapping[str, float], tie_rel: float = DEFAULT_TIE_REL) -> str | None:
    """The most conservative backend within `tie_rel` of the fastest one (None when nothing was measured)."""
    if not latency_at_t:
        return None
    best = min(latency_at_t.values())
    close = [n for n, us in latency_at_t.items() if us <= best * (1.0 + tie_rel)]
    return min(close, key=_pref_rank)


def winners(latency: Mapping[str, Mapping[int, float]], tokens: Iterable[int],
            tie_rel: float = DEFAULT_TIE_REL) -> dict[int, str]:
    """Per measured token count, the winner among the backends measured there."""
    out: dict[int, str] = {}
    for t in sorted(tokens):
        w = pick_fastest({n: lat[t] for n, lat in latency.items() if t in lat}, tie_rel)
        if w is not None:
            out[t] = w
    return out


def ranges_from_winners(wins: Mapping[int, str], hidden: int, elem_size: int) -> list[dict[str, Any]]:
    """Contiguous token ranges with one backend each (see the module doc for the boundary rule)."""
    ranges: list[dict[str, Any]] = []
    for t in sorted(wins):
        if ranges and ranges[-1]["backend"] == wins[t]:
            ranges[-1]["tokens"][1] = t
        else:
            lo = ranges[-1]["tokens"][1] + 1 if ranges else 1
            ranges.append({"tokens": [lo, t], "backend": wins[t]})
    for r in ranges:
        r["bytes"] = [r["tokens"][0] * hidden * elem_size, r["tokens"][1] * hidden * elem_size]
    return ranges


# ------------------------------------------------------------------------------- building an entry

def _t_map(d: Mapping[str, Any]) -> dict[int, Any]:
    return {int(k): v for k, v in d.items()}


def correct_latencies(results: Mapping[str, Any],
                      op: str) -> tuple[dict[str, dict[int, float]], dict[str, str]]:
    """Net per-call latency of every backend of `op` that passed all its checks, and why others are out."""
    keep: dict[str, dict[int, float]] = {}
    excluded: dict[str, str] = {}
    for name, info in results.get("backends", {}).items():
        if info.get("op") != op:
            continue
        if not info.get("available"):
            excluded[name] = f"not available: {info.get('reason') or 'unknown'}"
            continue
        checks = _t_map(results.get("checks", {}).get(name, {}))
        failed = sorted(t for t, c in checks.items() if not c.get("ok"))
        if failed:
            excluded[name] = f"numerics check failed at T={failed}"
            continue
        lat = {t: float(v["net"]) for t, v in _t_map(results.get("latency_us", {}).get(name, {})).items()
               if v.get("net") is not None}
        if not lat:
            excluded[name] = "no latency measured"
            continue
        unchecked = sorted(set(lat) - set(checks))
        if unchecked:
            excluded[name] = f"latency without a numerics check at T={unchecked}"
            continue
        keep[name] = lat
    return keep, excluded


def build_entry(results: Mapping[str, Any], key: TopologyKey, *, tie_rel: float = DEFAULT_TIE_REL,
                source: Mapping[str, Any] | None = None) -> dict[str, Any]:
    cfg = results["config"]
    hidden, elem = int(cfg["hidden"]), int(cfg["elem_size"])
    tokens = sorted(int(t) for t in cfg["tokens"])
    ops: dict[str, Any] = {}
    for op in OPS:
        lat, excluded = correct_latencies(results, op)
        ops[op] = {
            "latency_us": {n: {str(t): round(us, 3) for t, us in sorted(v.items())} for n, v in lat.items()},
            "excluded": excluded,
            "ranges": ranges_from_winners(winners(lat, tokens, tie_rel), hidden, elem),
        }
    profiles = {}
    for prof, pdata in (results.get("nccl_profiles") or {}).items():
        profiles[prof] = {n: {str(t): round(float(v["net"]), 3) for t, v in _t_map(per_t).items()
                              if v.get("net") is not None}
                          for n, per_t in pdata.get("latency_us", {}).items()}
    return {
        "gpu_name": key.gpu_name, "capability": key.capability, "world_size": key.world_size,
        "link": key.link,
        "hidden": hidden, "dtype": cfg["dtype"], "elem_size": elem, "tokens": tokens, "tie_rel": tie_rel,
        "created": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat(),
        "source": dict(source or {}),
        "ops": ops,
        "nccl_profiles": profiles,
    }


# ----------------------------------------------------------------------------- load / validate / save

def new_table() -> dict[str, Any]:
    return {"schema": SCHEMA, "entries": {}}


def validate_table(table: Any) -> list[str]:
    """Problems with a table, each naming the key at fault (empty list: valid)."""
    if not isinstance(table, dict):
        return ["table must be a JSON object"]
    probs = []
    if table.get("schema") != SCHEMA:
        probs.append(f"schema is {table.get('schema')!r}, expected {SCHEMA!r}")
    entries = table.get("entries")
    if not isinstance(entries, dict):
        return [*probs, "'entries' must be an object"]
    for key, e in entries.items():
        where = f"entries[{key!r}]"
        if not isinstance(e, dict):
            probs.append(f"{where} must be an object")
            continue
        for f, typ in (("gpu_name", str), ("capability", str), ("world_size", int), ("link", str),
                       ("hidden", int), ("elem_size", int), ("tokens", list), ("ops", dict)):
            if not isinstance(e.get(f), typ):
                probs.append(f"{where}.{f} missing or not {typ.__name__}")
        if probs and probs[-1].startswith(where):
            continue
        expect = TopologyKey(e["gpu_name"], e["capability"], e["world_size"], e["link"]).key()
        if key != expect:
            probs.append(f"{where}: key does not match its fields (expected {expect!r})")
        for op in OPS:
            o = e["ops"].get(op)
            if not isinstance(o, dict) or not isinstance(o.get("ranges"), list) \
                    or not isinstance(o.get("latency_us"), dict):
                probs.append(f"{where}.ops.{op} missing ranges/latency_us")
                continue
            prev_hi = 0
            for i, r in enumerate(o["ranges"]):
                toks = r.get("tokens") if isinstance(r, dict) else None
                if not (isinstance(toks, list) and len(toks) == 2 and all(isinstance(x, int) for x in toks)
                        and toks[0] == prev_hi + 1 and toks[1] >= toks[0]):
                    probs.append(f"{where}.ops.{op}.ranges[{i}]: tokens must be [previous hi + 1, hi], "
                                 f"got {toks!r}")
                    break
                if r.get("backend") not in o["latency_us"]:
                    probs.append(f"{where}.ops.{op}.ranges[{i}]: backend {r.get('backend')!r} has no latency")
                prev_hi = toks[1]
    return probs


def load_table(path: Path) -> dict[str, Any]:
    try:
        table = json.loads(Path(path).read_bytes().decode("utf-8"))
    except FileNotFoundError:
        raise UserError(f"{path}: no such all-reduce table (`bench allreduce --tune` writes one)") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read the all-reduce table ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except json.JSONDecodeError as e:
        raise UserError(f"{path}: not valid JSON: {e}") from None
    probs = validate_table(table)
    if probs:
        raise UserError(f"{path}: invalid all-reduce table: " + "; ".join(probs))
    return table


def merge_entry(table: Mapping[str, Any], entry: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of `table` with `entry` added or replacing the one of the same key."""
    out = {"schema": SCHEMA, "entries": dict(table.get("entries", {}))}
    key = TopologyKey(entry["gpu_name"], entry["capability"], entry["world_size"], entry["link"]).key()
    out["entries"][key] = dict(entry)
    return out


def save_table(table: Mapping[str, Any], path: Path) -> Path:
    probs = validate_table(table)
    if probs:
        raise ValueError(f"refusing to write an invalid all-reduce table to {path}: {probs}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(table, indent=1) + "\n")
    return path


def default_table_path() -> Path:
    """$SGLANG_BLACKWELL_ALLREDUCE_TABLE, else ~/.config/sglang-blackwell/allreduce_table.json."""
    env = os.environ.get("SGLANG_BLACKWELL_ALLREDUCE_TABLE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CONFIG_HOME")
    return (Path(xdg) if xdg else Path.home() / ".config") / "sglang-blackwell" / "allreduce_table.json"


def lookup(table: Mapping[str, Any], key: TopologyKey | str, op: str, tokens: int) -> str | None:
    """The table's backend for `op` at `tokens` (None: no entry, or above the largest measured size)."""
    e = table.get("entries", {}).get(key.key() if isinstance(key, TopologyKey) else key)
    if e is None:
        return None
    for r in e["ops"][op]["ranges"]:
        if r["tokens"][0] <= tokens <= r["tokens"][1]:
            return r["backend"]
    return None


# ------------------------------------------------------------------------------------------ knobs

def prefix_threshold(tokens: Iterable[int], new: Mapping[int, float], default: Mapping[int, float]) -> int:
    """Largest token count T* such that using `new` for T <= T* and `default` above maximizes the summed
    relative saving over the measured sizes. 0 means never use `new`. Ties go to the smaller T*."""
    best_t, best_gain, gain = 0, 0.0, 0.0
    for t in sorted(tokens):
        if t not in default:
            continue
        if t not in new:
            break  # `new` cannot serve this size, so no prefix may extend past it
        gain += (default[t] - new[t]) / default[t]
        if gain > best_gain + 1e-12:
            best_t, best_gain = t, gain
    return best_t


def _fi_runtime_variant(t: int, hidden: int, elem: int, ws: int) -> str:
    mib = t * hidden * 2 * ws * elem / 1024 / 1024
    return "fi_fused_oneshot" if mib <= FI_ONESHOT_MAX_MIB.get(ws, 0) else "fi_fused_twoshot"


def _pick_nccl_profile(entry: Mapping[str, Any], tie_rel: float, why: list[str]) -> str | None:
    """The NCCL profile with the lowest summed latency ratio to the best profile for plain NCCL."""
    profs = {p: _t_map(v.get("nccl", {})) for p, v in (entry.get("nccl_profiles") or {}).items()}
    profs = {p: v for p, v in profs.items() if v}
    if not profs:
        return None
    ts = sorted(set.intersection(*(set(v) for v in profs.values())))
    if not ts:
        return None
    cost = {p: sum(v[t] / min(q[t] for q in profs.values()) for t in ts) for p, v in profs.items()}
    best = min(cost.values())
    close = [p for p in profs if cost[p] <= best * (1 + tie_rel)]
    order = sorted(close, key=lambda p: (p != "none", cost[p]))
    chosen = order[0]
    why.append(f"NCCL profile {chosen!r}: lowest summed latency over T={ts[0]}..{ts[-1]} among "
               + ", ".join(f"{p} {cost[p] / len(ts):.3f}x best" for p in sorted(cost)))
    return chosen


@dataclass(frozen=True)
class _Measured:
    """An entry's correct latencies as the decisions read them, {backend: {T: us}} per op; NCCL's come from the
    recommended NCCL profile when profiles were measured."""

    tokens: list[int]
    hidden: int
    elem: int
    world_size: int
    ar: dict[str, dict[int, float]]
    fused_op: dict[str, dict[int, float]]

    @property
    def nccl(self) -> dict[int, float]:
        return self.ar.get("nccl", {})

    @property
    def nccl_norm(self) -> dict[int, float]:
        return self.fused_op.get("nccl_norm", {})


@dataclass(frozen=True)
class _Thresholds:
    """The largest token count each choice takes (0: never), as knobs_from_table decided them."""

    symm_oneshot: int  # 1. symm-mem one-shot below, two-shot above
    symm_mem: int  # 2. symm-mem vs NCCL for plain all-reduces
    pcie_ipc: int  # 3. the PCIe-IPC all-reduce vs what plain all-reduces take otherwise
    fusion: int  # 4. fusion vs the unfused runtime path
    fusion_with_pcie_ipc: int  # 4. the same on lines whose unfused path is PCIe-IPC


def _measured(entry: Mapping[str, Any], profile: str | None) -> _Measured:
    ar = {n: _t_map(v) for n, v in entry["ops"]["ar"]["latency_us"].items()}
    fused_op = {n: _t_map(v) for n, v in entry["ops"]["ar_rmsnorm"]["latency_us"].items()}
    if profile is not None:
        for name, src in (("nccl", ar), ("nccl_norm", fused_op)):
            pl = _t_map(entry["nccl_profiles"][profile].get(name, {}))
            if pl and name in src:
                src[name] = pl
    return _Measured(sorted(entry["tokens"]), entry["hidden"], entry["elem_size"], entry["world_size"], ar,
                     fused_op)


def _decide_symm_oneshot(m: _Measured, why: list[str]) -> int:
    """1. symm-mem one-shot below the threshold, two-shot above."""
    one, two = m.ar.get("symm_oneshot"), m.ar.get("symm_twoshot")
    if one and two:
        t_one = prefix_threshold(m.tokens, one, two)
        why.append(f"symm-mem one-shot up to T={t_one}, two-shot above (summed saving vs two-shot)")
    elif one:
        t_one = m.tokens[-1]
        why.append("symm-mem: only one-shot measured correct, so one-shot at every size")
    else:
        t_one = 0
        why.append("symm-mem: one-shot not measured correct" + ("" if two else "; two-shot neither"))
    return t_one


def _symm_latency(m: _Measured, t_one: int) -> dict[int, float]:
    """What symm-mem takes per size once one-shot/two-shot is decided."""
    one, two = m.ar.get("symm_oneshot"), m.ar.get("symm_twoshot")
    symm = {t: (one[t] if one and t <= t_one and t in one else (two or {}).get(t)) for t in m.tokens}
    return {t: v for t, v in symm.items() if v is not None}


def _decide_symm_mem(m: _Measured, symm: Mapping[int, float], why: list[str]) -> int:
    """2. torch symm-mem vs NCCL for plain all-reduces."""
    if symm and m.nccl:
        t_symm = prefix_threshold(m.tokens, symm, m.nccl)
        nbytes = {t: t * m.hidden * m.elem for t in m.tokens}
        why.append(f"torch symm-mem for all-reduces up to T={t_symm} ({nbytes.get(t_symm, 0)} B), NCCL above"
                   if t_symm else "torch symm-mem off: it does not beat NCCL from the smallest size up")
        return t_symm
    why.append("torch symm-mem off: " + ("not measured correct here (see excluded backends)" if m.nccl
                                         else "no NCCL measurement to compare with"))
    return 0


def _decide_pcie_ipc(m: _Measured, symm: Mapping[int, float], t_symm: int, ipc_lines: list[str],
                     why: list[str]) -> int:
    """3. (sglang >= 0.5.23) the PCIe-IPC all-reduce vs what plain all-reduces take otherwise."""
    ipc = m.ar.get("fi_pcie_ipc", {})
    plain = {t: v for t in m.tokens if (v := symm.get(t) if t <= t_symm else m.nccl.get(t)) is not None}
    t_ipc = prefix_threshold(m.tokens, ipc, plain) if ipc and plain else 0
    if t_ipc:
        why.append(f"PCIe-IPC all-reduce (sglang {', '.join(ipc_lines)}) for T <= {t_ipc}: at T={t_ipc} "
                   f"{ipc[t_ipc]:.2f} us vs {plain[t_ipc]:.2f} us; symm-mem / NCCL above")
    elif ipc:
        why.append("PCIe-IPC all-reduce off: it does not beat symm-mem / NCCL from the smallest size up")
    else:
        why.append("PCIe-IPC all-reduce: not measured correct here (needs flashinfer >= 0.7.0, TP 2/4/8)")
    return t_ipc


def _unfused_latency(m: _Measured, t: int, t_one: int, t_symm: int, t_ipc: int, with_ipc: bool) -> float | None:
    """AR+residual+RMSNorm at `t` tokens the way the runtime does it unfused (the all-reduce it would take, then
    add+RMSNorm); `with_ipc`: on a PCIe-IPC line."""
    if with_ipc and t <= t_ipc:
        return m.fused_op.get("fi_pcie_ipc_norm", {}).get(t)
    if t <= t_symm:
        v = m.fused_op.get("symm_oneshot_norm" if t <= t_one else "symm_twoshot_norm", {}).get(t)
        if v is not None:
            return v
    return m.nccl_norm.get(t)


def _fused_latency(m: _Measured) -> dict[int, float]:
    """The fused op at each size as FlashInfer's own one-/two-shot pick (sglang passes use_oneshot=None)."""
    return {t: m.fused_op[n][t] for t in m.tokens
            if (n := _fi_runtime_variant(t, m.hidden, m.elem, m.world_size)) in m.fused_op and t in m.fused_op[n]}


def _decide_fusion(m: _Measured, t_one: int, t_symm: int, t_ipc: int, ipc_lines: list[str],
                   why: list[str]) -> tuple[int, int]:
    """4. fusion vs the unfused runtime path, per line: on PCIe-IPC lines its unfused path differs.
    (threshold, threshold on PCIe-IPC lines)."""
    fused = _fused_latency(m)

    def threshold(with_ipc: bool) -> int:
        base = {t: v for t in m.tokens if (v := _unfused_latency(m, t, t_one, t_symm, t_ipc, with_ipc)) is not None}
        return prefix_threshold(m.tokens, fused, base) if base else 0

    t_fuse = threshold(False)
    if t_fuse:
        base_at = _unfused_latency(m, t_fuse, t_one, t_symm, t_ipc, False)
        why.append(f"FlashInfer AR+residual+RMSNorm fusion for T <= {t_fuse}: at T={t_fuse} "
                   f"{fused[t_fuse]:.2f} us vs unfused {base_at:.2f} us")
    else:
        why.append("FlashInfer fusion off: " + ("it does not beat the unfused path from the smallest size up"
                                                 if fused else "no fused backend measured correct"))
    t_fuse_ipc = t_fuse
    if t_ipc:
        t_fuse_ipc = threshold(True)
        if t_fuse_ipc != t_fuse:
            why.append(f"with PCIe-IPC the unfused path is PCIe-IPC + add+RMSNorm: fusion for T <= {t_fuse_ipc} "
                       f"on {', '.join(ipc_lines)}")
    return t_fuse, t_fuse_ipc


def _decide(m: _Measured, ipc_lines: list[str], why: list[str]) -> _Thresholds:
    """The four decisions, in order, each maximizing the summed relative saving (see prefix_threshold)."""
    t_one = _decide_symm_oneshot(m, why)
    symm = _symm_latency(m, t_one)
    t_symm = _decide_symm_mem(m, symm, why)
    t_ipc = _decide_pcie_ipc(m, symm, t_symm, ipc_lines, why)
    t_fuse, t_fuse_ipc = _decide_fusion(m, t_one, t_symm, t_ipc, ipc_lines, why)
    return _Thresholds(t_one, t_symm, t_ipc, t_fuse, t_fuse_ipc)


def _env(d: _Thresholds, m: _Measured) -> dict[str, str]:
    """The P7 env knobs every line reads (the symm-mem sizes in bytes: one token past each threshold)."""
    row = m.hidden * m.elem
    return {
        ENV_FUSION_MAX_TOKENS: str(d.fusion),
        ENV_SYMM_MAX: str((d.symm_mem + 1) * row if d.symm_mem else 0),
        ENV_SYMM_ONESHOT_MAX: str((min(d.symm_oneshot, d.symm_mem) + 1) * row
                                  if d.symm_mem and d.symm_oneshot else 0),
    }


def _per_line(d: _Thresholds, m: _Measured,
              lines: list[Base]) -> tuple[dict[str, dict[str, str]], dict[str, list[str]]]:
    """(env_by_line, server_args): each line's own [serving] variables and flags for the decisions."""
    env_by_line: dict[str, dict[str, str]] = {}
    server_args = {}
    for b in lines:
        fuse, s = d.fusion, b.serving
        if d.pcie_ipc and s.has_pcie_ipc:
            fuse = d.fusion_with_pcie_ipc
            env_by_line[b.name] = {s.pcie_ipc_env: "1", s.pcie_ipc_max_numel_env: str(d.pcie_ipc * m.hidden)}
            if d.fusion_with_pcie_ipc != d.fusion:
                env_by_line[b.name][ENV_FUSION_MAX_TOKENS] = str(d.fusion_with_pcie_ipc)
        fusion_flags = s.fusion_on_flags if fuse else s.fusion_off_flags
        server_args[b.name] = [*fusion_flags, *([SYMM_MEM_FLAG] if d.symm_mem else [])]
    return env_by_line, server_args


def _unmatched(table: Mapping[str, Any], key: TopologyKey, lines: list[Base]) -> dict[str, Any]:
    known = ", ".join(sorted(table.get("entries", {}))) or "none"
    return {"key": key.key(), "matched": False, "env": {}, "env_by_line": {},
            "server_args": {b.name: [] for b in lines},
            "nccl_profile": None, "decisions": {},
            "why": [f"no table entry for {key.key()!r} (entries: {known}): upstream defaults apply"]}


def knobs_from_table(table: Mapping[str, Any], key: TopologyKey, *, tie_rel: float | None = None,
                     lines: list[Base] | None = None) -> dict[str, Any]:
    """The upstream-style knobs (env + server flags per sglang line) for the GPUs `key` names, and why.

    Decisions, in order (each maximizes the summed relative saving over the measured sizes, see
    prefix_threshold): one-shot vs two-shot symm-mem; symm-mem vs NCCL (AR-only); the PCIe-IPC all-reduce vs
    that; FlashInfer fusion vs the unfused path the runtime would take otherwise (AR via PCIe-IPC, symm-mem or
    NCCL, then add+RMSNorm). The fused latency at each size is FlashInfer's own one-/two-shot pick (sglang passes
    use_oneshot=None). NCCL numbers come from the recommended NCCL profile when profiles were measured. `lines`:
    the base lines to say the server flags and env of (default: every base in patches/).
    """
    lines = lines if lines is not None else list_bases()
    entry = table.get("entries", {}).get(key.key())
    if entry is None:
        return _unmatched(table, key, lines)
    tie = entry.get("tie_rel", DEFAULT_TIE_REL) if tie_rel is None else tie_rel
    tokens = sorted(entry["tokens"])
    why: list[str] = [f"table entry {key.key()} (hidden {entry['hidden']}, {entry['dtype']}, "
                      f"T={tokens[0]}..{tokens[-1]})"]
    profile = _pick_nccl_profile(entry, tie, why)
    m = _measured(entry, profile)
    d = _decide(m, [b.name for b in lines if b.serving.has_pcie_ipc], why)
    env_by_line, server_args = _per_line(d, m, lines)
    no_off = [b.name for b in lines if not b.serving.fusion_off_flags]
    if not d.fusion and no_off:
        why.append(f"{', '.join(no_off)} has no fusion-off flag; the env knob set to 0 turns it off on a "
                   "P7-patched server")
    return {
        "key": key.key(), "matched": True, "env": _env(d, m), "env_by_line": env_by_line,
        "server_args": server_args, "nccl_profile": profile,
        "decisions": {"fusion_max_tokens": d.fusion, "symm_mem_max_tokens": d.symm_mem,
                      "symm_mem_oneshot_max_tokens": min(d.symm_oneshot, d.symm_mem),
                      "pcie_ipc_max_tokens": d.pcie_ipc, "fusion_max_tokens_with_pcie_ipc": d.fusion_with_pcie_ipc,
                      "hidden": m.hidden, "elem_size": m.elem},
        "why": why,
    }
