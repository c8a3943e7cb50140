"""PNG plots of a bench-eagle3 receipt: output tok/s per arm per concurrency, and accept length next to the
break-even accept length. Needs matplotlib (extra `plot`); without it the receipt is still written and the
plots can be made later (`sglang-blackwell bench eagle3 --config ... --from-runs ...`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any


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
    s = receipt["summary"]
    title = f"{s['config']} on {s['machine']}, TP={s['tp']}"
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
    ax.set_title(title + ("  PASS" if receipt["summary"]["passed"] else "  FAIL"), fontsize=9)
    ax.legend(fontsize=8)
    out.append(_save(fig, stem.with_name(stem.name + "_tok_s.png")))
    plt.close(fig)

    spec_arms = [a for a in arms if receipt["arms"][a]["speculative"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    table = {(t["arm"], t["concurrency"]): t for t in receipt["verdict"].get("table", [])}
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
    return out
