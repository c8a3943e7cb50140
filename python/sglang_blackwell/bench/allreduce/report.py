"""What `bench allreduce` shows and keeps: text tables, per-forward totals, the JSON receipt, the plot.

All of it is computed from the results dict the workers write (ar_worker), so it can be re-rendered on a
machine without GPUs (`--from-receipt`). "Chosen" means what the tuner chooses: the fastest backend of the
operation that passed every numerics check, conservative on ties (allreduce_table.pick_fastest).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ...box import allreduce_table as tbl
from ...box.allreduce_catalog import CATALOG
from ...receipts import make_receipt

KIND = "bench-allreduce"
OP_TITLES = {"ar_rmsnorm": "all-reduce + residual + RMSNorm", "ar": "all-reduce only"}


def _tokens(results: dict[str, Any]) -> list[int]:
    return sorted(int(t) for t in results["config"]["tokens"])


def kbytes(results: dict[str, Any], t: int) -> float:
    return t * results["config"]["hidden"] * results["config"]["elem_size"] / 1024


def chosen(results: dict[str, Any], op: str, t: int) -> tuple[str, float] | None:
    lat, _ = tbl.correct_latencies(results, op)
    name = tbl.pick_fastest({n: v[t] for n, v in lat.items() if t in v})
    return (name, lat[name][t]) if name else None


def _net(results: dict[str, Any], name: str, t: int) -> float | None:
    v = results.get("latency_us", {}).get(name, {}).get(str(t))
    return None if v is None else v["net"]


def machine(results: dict[str, Any]) -> dict[str, Any]:
    topo = results.get("meta", {}).get("topology") or {}
    return {"gpu_name": topo.get("gpu_name"), "gpu_count": topo.get("gpu_count"),
            "capability": topo.get("capability"),
            "links": {"type": topo.get("link"), "p2p_access": topo.get("p2p_access"),
                      "p2p_atomics": topo.get("p2p_atomics"), "source": topo.get("source")}}


def machine_label(results: dict[str, Any]) -> str:
    topo = results.get("meta", {}).get("topology") or {}
    cap = str(topo.get("capability", "?")).replace(".", "")
    return f"{results['config']['tp']}x {topo.get('gpu_name', '?')} (sm{cap}, {topo.get('link', '?')})"


def failed_checks(results: dict[str, Any]) -> list[str]:
    return [f"{n}@T={t}" for n, per_t in results.get("checks", {}).items()
            for t, c in per_t.items() if not c["ok"]]


def summary(results: dict[str, Any], layers: int) -> dict[str, Any]:
    """The small, comparable part of the receipt (at T=3: the EAGLE-3 verify of one request)."""
    n_ar = 2 * layers
    fused, ar_best = chosen(results, "ar_rmsnorm", 3), chosen(results, "ar", 3)
    base, nccl = _net(results, "nccl_norm", 3), _net(results, "nccl", 3)
    profiles = {p: _net(v, "nccl", 3) for p, v in (results.get("nccl_profiles") or {}).items()}
    fails = failed_checks(results)
    return {
        "machine": machine_label(results),
        "tp": results["config"]["tp"],
        "hidden": results["config"]["hidden"],
        "dtype": results["config"]["dtype"],
        "layers": layers,
        "allreduces_per_forward": n_ar,
        "t3_chosen_backend": fused[0] if fused else None,
        "t3_chosen_us": fused[1] if fused else None,
        "t3_nccl_norm_us": base,
        "t3_chosen_over_nccl_norm": round(fused[1] / base, 3) if fused and base else None,
        "per_forward_us_t3": round(fused[1] * n_ar, 1) if fused else None,
        "per_forward_us_t3_nccl_norm": round(base * n_ar, 1) if base else None,
        "t3_ar_only_backend": ar_best[0] if ar_best else None,
        "t3_ar_only_us": ar_best[1] if ar_best else None,
        "t3_nccl_us": nccl,
        "t3_nccl_us_by_profile": profiles,
        "checks_passed": not fails,
        "failed_checks": fails[:20],
        "flashinfer_api": results.get("meta", {}).get("facts", {}).get("flashinfer_api"),
    }


# ------------------------------------------------------------------------------------------- text

def _cell(results: dict[str, Any], name: str, t: int) -> str:
    v = _net(results, name, t)
    if v is None:
        err = results.get("errors", {}).get(name, {}).get(str(t), "")
        return "skip" if err.startswith("skipped") else ("ERR" if err else "-")
    ok = results.get("checks", {}).get(name, {}).get(str(t), {}).get("ok", False)
    return f"{v:.2f}" + ("" if ok else "!")


def _grid(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = "  ".join(f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths))
    return "\n".join(fmt.format(*r) for r in [header, *rows])


def latency_tables(results: dict[str, Any]) -> str:
    ts = _tokens(results)
    out = []
    for op in ("ar_rmsnorm", "ar"):
        names = [n for n, b in results["backends"].items() if b["op"] == op and b["available"]]
        if not names:
            continue
        rows = [[n, *(_cell(results, n, t) for t in ts)] for n in names]
        out.append(f"{OP_TITLES[op]}: net us per call (in-graph, producer kernel subtracted; "
                   f"'!' = numerics check failed)\n" + _grid(["T", *map(str, ts)], rows))
    prod = [["producer (copy)", *(f"{results['producer_us'].get(str(t), float('nan')):.2f}" for t in ts)]]
    out.append(_grid(["T", *map(str, ts)], prod))
    return "\n\n".join(out)


def forward_table(results: dict[str, Any], layers: int) -> str:
    n_ar = 2 * layers
    rows = []
    for t in _tokens(results):
        fused, ar_best, base = chosen(results, "ar_rmsnorm", t), chosen(results, "ar", t), \
            _net(results, "nccl_norm", t)
        rows.append([str(t), f"{kbytes(results, t):.0f}",
                     fused[0] if fused else "-", f"{fused[1] * n_ar:.0f}" if fused else "-",
                     f"{base * n_ar:.0f}" if base else "-",
                     f"{fused[1] / base:.2f}" if fused and base else "-",
                     ar_best[0] if ar_best else "-", f"{ar_best[1] * n_ar:.0f}" if ar_best else "-"])
    return (f"per forward: {n_ar} all-reduces ({layers} layers x 2), us\n"
            + _grid(["T", "KB", "chosen AR+norm", "us/fwd", "NCCL+norm us/fwd", "ratio", "best AR-only",
                     "us/fwd"], rows))


def profile_table(results: dict[str, Any]) -> str:
    profs = results.get("nccl_profiles") or {}
    if not profs:
        return ""
    ts = _tokens(results)
    rows = [[f"{name} @ {p}" + (" (= main run)" if v.get("reused_main_run") else ""),
             *(_cell(v, name, t) for t in ts)]
            for p, v in profs.items() for name in ("nccl", "nccl_norm") if name in v.get("latency_us", {})]
    return "NCCL under each tuning profile: net us per call\n" + _grid(["T", *map(str, ts)], rows)


def problems(results: dict[str, Any]) -> str:
    lines = [f"  {n}: {b['reason']}" for n, b in results["backends"].items() if not b["available"]]
    errs = [f"  {n} T={t}: {m[:160]}" for n, per in results.get("errors", {}).items() for t, m in per.items()
            if not m.startswith("skipped")]
    out = []
    if lines:
        out.append("backends not measured:\n" + "\n".join(lines))
    if errs:
        out.append("errors:\n" + "\n".join(errs))
    if results.get("failure"):
        out.append(f"run incomplete: {results['failure']}")
    return "\n".join(out)


def format_report(results: dict[str, Any], layers: int) -> str:
    parts = [f"== all-reduce latency, {machine_label(results)}, hidden {results['config']['hidden']} "
             f"{results['config']['dtype']}", latency_tables(results), forward_table(results, layers),
             profile_table(results), problems(results)]
    return "\n\n".join(p for p in parts if p)


# ---------------------------------------------------------------------------------------- receipt

def build_receipt(results: dict[str, Any], layers: int, **extra: Any) -> dict[str, Any]:
    return make_receipt(KIND, summary(results, layers), tp=results["config"]["tp"], machine=machine(results),
                        versions=results.get("meta", {}).get("versions") or None, results=results, **extra)


# ------------------------------------------------------------------------------------------- plot

def plot(results: dict[str, Any], path: Path) -> Path:
    """Latency vs message size, one line per backend (solid: AR-only, dashed: AR+residual+RMSNorm,
    dotted: NCCL under a tuning profile); x marks sizes whose numerics check failed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter, ScalarFormatter

    fig, ax = plt.subplots(figsize=(10, 6))
    series: list[tuple[str, dict[str, Any], str, str]] = [
        (n, results, n, "--" if CATALOG.get(n) and CATALOG[n].op == "ar_rmsnorm" else "-")
        for n in results.get("latency_us", {})]
    for p, v in (results.get("nccl_profiles") or {}).items():
        if v.get("reused_main_run"):
            continue
        series += [(f"{n} @ {p}", v, n, ":") for n in v.get("latency_us", {})]
    colors = plt.get_cmap("tab20").colors
    for i, (label, res, name, style) in enumerate(series):
        pts = sorted((int(t), d["net"]) for t, d in res["latency_us"][name].items())
        if not pts:
            continue
        xs = [kbytes(results, t) for t, _ in pts]
        line, = ax.plot(xs, [us for _, us in pts], style, marker="o", markersize=3, label=label,
                        color=colors[(2 * i) % 20 + (2 * i) // 20 % 2])
        bad = [(kbytes(results, int(t)), _net(res, name, int(t))) for t, c in
               res.get("checks", {}).get(name, {}).items() if not c["ok"]]
        if bad:
            ax.plot(*zip(*bad, strict=True), "x", color=line.get_color(), markersize=9)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ts = _tokens(results)
    ax.set_xticks([kbytes(results, t) for t in ts], [f"{t}\n{kbytes(results, t):.0f}" for t in ts],
                  fontsize=8)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.yaxis.set_major_formatter(ScalarFormatter())
    ax.yaxis.set_minor_formatter(ScalarFormatter())
    ax.tick_params(axis="y", which="minor", labelsize=7)
    cfg = results["config"]
    ax.set_xlabel(f"tokens / message KB (tokens x {cfg['hidden']} x {cfg['dtype']})")
    ax.set_ylabel("us per call (in-graph, net of producer)")
    ax.set_title(f"all-reduce latency, {machine_label(results)}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, path)
    return path
