"""PNG plots of a bench-eagle3 receipt: output tok/s per arm per concurrency, and accept length next to the
break-even accept length (a grid receipt: its smallest context), and for a grid receipt the heatmap of the warm
EAGLE-3 / baseline ratio per (context, concurrency) cell. Needs matplotlib (extra `plot`); without it the receipt
is still written and the plots can be made later (`sglang-blackwell bench eagle3 --config ... --from-runs ...`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from . import summary_keys
from .grid_verdict import row_first_ratio


def available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _save(fig: Any, path: Path) -> Path:
    tmp = path.with_name("." + path.name + ".tmp.png")
    fig.savefig(tmp, dpi=110, bbox_inches="tight")
    os.replace(tmp, path)
    return path


def plot_receipt(receipt: dict[str, Any], stem: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    agg = receipt["aggregate"]
    arms = list(agg)
    conc = [int(c) for c in receipt["workload"]["concurrency"]]
    summary = receipt["summary"]
    title = f"{summary[summary_keys.CONFIG]} on {summary[summary_keys.MACHINE]}, TP={summary[summary_keys.TP]}"
    out = []

    fig, ax = plt.subplots(figsize=(1.8 + 1.6 * len(conc) * len(arms) / 2, 4))
    width = 0.8 / max(len(arms), 1)
    for i, arm in enumerate(arms):
        xs, med, lo, hi, dots = [], [], [], [], []
        for j, c in enumerate(conc):
            s = agg[arm]["levels"][str(c)]["tok_s"]
            if not s:
                continue
            x = j + (i - (len(arms) - 1) / 2) * width
            xs.append(x)
            med.append(s["median"])
            lo.append(s["median"] - s["min"])
            hi.append(s["max"] - s["median"])
            dots += [(x, v) for v in s["values"]]
        ax.bar(xs, med, width * 0.9, yerr=[lo, hi], capsize=3, label=arm)
        if dots:
            ax.plot([d[0] for d in dots], [d[1] for d in dots], "k.", markersize=4)
    ax.set_xticks(range(len(conc)), [str(c) for c in conc])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("output tok/s (bar: median, whisker: min-max, dots: repeats)")
    ax.set_title(title + ("  PASS" if summary[summary_keys.PASSED] else "  FAIL"), fontsize=9)
    ax.legend(fontsize=8)
    out.append(_save(fig, stem.with_name(stem.name + "_tok_s.png")))
    plt.close(fig)

    spec_arms = [a for a in arms if receipt["arms"][a]["speculative"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    c0 = (receipt["workload"].get("contexts") or [None])[0]  # a grid receipt's levels are its smallest context
    table = {(t["arm"], t["concurrency"]): t for t in receipt["verdict"].get("table", [])
             if t.get("context") == c0}
    for i, arm in enumerate(spec_arms):
        color = f"C{arms.index(arm)}"
        xs, med, lo, hi, be_x, be = [], [], [], [], [], []
        for c in conc:
            s = agg[arm]["levels"][str(c)]["accept_len"]
            if s:
                xs.append(c * (1 + 0.03 * i))
                med.append(s["median"])
                lo.append(s["median"] - s["min"])
                hi.append(s["max"] - s["median"])
            t = table.get((arm, c))
            if t and t.get("break_even_accept_len"):
                be_x.append(c * (1 + 0.03 * i))
                be.append(t["break_even_accept_len"])
        if xs:
            ax.errorbar(xs, med, yerr=[lo, hi], marker="o", capsize=3, color=color,
                        label=f"{arm}: accept length")
        if be:
            ax.plot(be_x, be, "x--", color=color, label=f"{arm}: break-even (round ms / decode ms)")
    ax.set_ylim(bottom=0)
    ax.set_xscale("log", base=2)
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_xlabel("concurrency")
    ax.set_ylabel("tokens per draft+verify round")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    out.append(_save(fig, stem.with_name(stem.name + "_accept.png")))
    plt.close(fig)
    if receipt["workload"].get("contexts"):
        out.append(plot_grid(receipt, stem.with_name(stem.name + "_grid.png"), plt))
    return out


def plot_grid(receipt: dict[str, Any], path: Path, plt: Any) -> Path:
    """One heatmap per speculative arm: rows contexts, columns concurrency, colour the warm ratio (1.0 = the
    baseline), each cell annotated with the warm ratio, the first-burst ratio and pass / FAIL."""
    ctxs, conc = receipt["workload"]["contexts"], receipt["workload"]["concurrency"]
    rows = receipt["verdict"].get("table", [])
    arms = [a for a in receipt["aggregate"] if any(t["arm"] == a for t in rows)]
    fig, axes = plt.subplots(1, max(len(arms), 1), figsize=(1.2 + 1.9 * len(conc) * max(len(arms), 1),
                                                              1.2 + 0.8 * len(ctxs)), squeeze=False)
    for ax, arm in zip(axes[0], arms or [None], strict=True):
        by = {(t["context"], t["concurrency"]): t for t in rows if t["arm"] == arm}
        grid = [[(by.get((x, c)) or {}).get("median_ratio") for c in conc] for x in ctxs]
        values = [[v if v is not None else float("nan") for v in row] for row in grid]
        im = ax.imshow(values, cmap="RdYlGn", vmin=0.5, vmax=1.5, aspect="auto")
        for i, x in enumerate(ctxs):
            for j, c in enumerate(conc):
                t = by.get((x, c))
                if t:
                    verdict = {True: "pass", False: "FAIL", None: ""}[t.get("passed")]
                    ax.text(j, i, f"{_x(t.get('median_ratio'))}\nfirst {_x(row_first_ratio(t))}\n{verdict}",
                            ha="center", va="center", fontsize=8)
        ax.set_xticks(range(len(conc)), [str(c) for c in conc])
        ax.set_yticks(range(len(ctxs)), [str(x) for x in ctxs])
        ax.set_xlabel("concurrency")
        ax.set_ylabel("prompt tokens")
        ax.set_title(f"{arm} / baseline, warm" if arm else "no speculative arm measured", fontsize=9)
        fig.colorbar(im, ax=ax, fraction=0.05)
    s = receipt["summary"]
    fig.suptitle(f"{s[summary_keys.CONFIG]} on {s[summary_keys.MACHINE]}, TP={s[summary_keys.TP]}"
                 + ("  PASS" if s[summary_keys.PASSED] else "  FAIL"), fontsize=9, y=1.03)
    saved = _save(fig, path)
    plt.close(fig)
    return saved


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"
