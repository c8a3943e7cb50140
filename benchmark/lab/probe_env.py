#!/usr/bin/env python3
"""The lab on CPU, for launch_path_probe.py: a venv holding exactly the bundle's wheels (our patched wheels built for
the venv's Python, the --deps pins) plus the lab image's versions (--installed) of everything their requirements
reach, and torch linked in from another environment (the image's torch is a CUDA build). Nothing else: a
requirement that neither the bundle nor the image meets stays missing, as on the lab.

    .venv/bin/sglang-blackwell build --base 0.5.14 --python-version 3.11 --out /tmp/probe-wheels
    .venv/bin/python benchmark/lab/probe_env.py --venv /tmp/probe311 --interpreter python3.11 \
        --wheels /tmp/probe-wheels --deps benchmark/lab/bundle-deps-0.5.14-py312.txt \
        --installed benchmark/lab/installed-lab-image.txt --torch-from .venv

The pins and the image's versions are installed as `name<=version` with --prefer-binary: the image's version
where the venv's Python has a wheel of it, else the newest release below it that has one (the lab is cp312, the
venv may be cp311; e.g. numpy). `<venv>/probe-env.json` records every distribution, where it came from (bundle,
image, image-older, linked), and the requirements left unmet. Run with the project venv's python (reads
sglang_blackwell's dependency code); needs pip's index (or its mirror) once.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

from sglang_blackwell.artifacts.deps import Target, WheelInfo, collect_needs, read_installed, read_pins

DUMP = """import importlib.metadata as md, json, sys
print(json.dumps({d.metadata["Name"]: [d.version, d.requires or []] for d in md.distributions()}))"""
VENV_OWN = {"pip", "setuptools", "wheel"}


def dists(py: Path) -> dict[str, tuple[Version, list[Requirement]]]:
    raw = json.loads(subprocess.run([str(py), "-c", DUMP], check=True, capture_output=True, text=True).stdout)
    return {canonicalize_name(n): (Version(v), [Requirement(r) for r in reqs]) for n, (v, reqs) in raw.items()}


def pip(py: Path, specs: list[str]) -> None:
    if specs:
        subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--prefer-binary", "--disable-pip-version-check",
                        "-q", *specs], check=True)


def link_torch(src_env: Path, site: Path) -> list[str]:
    srcs = sorted(src_env.resolve().glob("lib/python3.*/site-packages"))
    if not srcs:
        raise SystemExit(f"--torch-from {src_env}: no lib/python3.*/site-packages")
    names = []
    for p in sorted(srcs[0].iterdir()):
        if p.name in ("torch", "torchgen", "functorch") or (p.name.startswith("torch-") and p.suffix == ".dist-info"):
            dest = site / p.name
            if not dest.exists():
                dest.symlink_to(p)
            names.append(p.name)
    if "torch" not in names:
        raise SystemExit(f"--torch-from {src_env}: no torch in {srcs[0]}")
    return names


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    ap.add_argument("--venv", type=Path, required=True, help="the venv to make (created if missing)")
    ap.add_argument("--interpreter", default="python3", help="the Python that creates it (default: python3)")
    ap.add_argument("--wheels", type=Path, required=True, help="our patched wheels for that Python (build --out)")
    ap.add_argument("--deps", type=Path, required=True, help="the bundle's --deps list")
    ap.add_argument("--installed", type=Path, required=True, help="the lab image's pip list --format=freeze")
    ap.add_argument("--torch-from", type=Path, required=True, help="an environment with a CPU torch to link")
    a = ap.parse_args(argv)
    if not (a.venv / "bin" / "python").exists():
        subprocess.run([a.interpreter, "-m", "venv", str(a.venv)], check=True)
    py = a.venv / "bin" / "python"
    ver = subprocess.run([str(py), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"], check=True,
                         capture_output=True, text=True).stdout.strip()
    target = Target(ver)
    site = next(a.venv.glob("lib/python3.*/site-packages"))
    image = read_installed(a.installed)
    pins = read_pins(a.deps)
    linked = link_torch(a.torch_from, site)
    ours = sorted(str(w) for w in a.wheels.glob("*.whl") if target.fits(w.name))
    if not ours:
        raise SystemExit(f"--wheels {a.wheels}: no wheel for Python {ver}")
    pinned = {p.name: p.version for p in pins}
    bundle = {canonicalize_name(parse_wheel_filename(Path(w).name)[0]) for w in ours} | {p.name for p in pins}
    pip(py, ours + [f"{p.name}<={p.version}" for p in pins])
    unmet: dict[str, str] = {}
    while True:
        have = dists(py)
        wheels = [WheelInfo(Path(), n, v, reqs, "dependency") for n, (v, reqs) in have.items()]
        todo = []
        for name, needs in sorted(collect_needs(wheels, target).items()):
            if name in have or name in unmet:
                continue
            if name in image and image[name].version is not None:
                todo.append(f"{name}<={image[name].version}")
            else:
                unmet[name] = "; ".join(f"{n.by} requires {n.req}" for n in needs)
        if not todo:
            break
        print(f"probe_env: image versions: {' '.join(todo)}", flush=True)
        pip(py, todo)
    report = {}
    for name, (v, _) in sorted(have.items()):
        if name in VENV_OWN:
            continue
        if name == "torch":
            src = "linked"
        elif name in bundle:
            src = "bundle" if name not in pinned or pinned[name] == v else f"bundle-older (pinned {pinned[name]})"
        elif name in image:
            src = "image" if image[name].version == v else f"image-older (image has {image[name].version})"
        else:
            src = "neither (check)"
        report[name] = {"version": str(v), "from": src}
    out = {"python": ver, "venv": str(a.venv), "deps": str(a.deps), "installed": str(a.installed),
           "linked": linked, "distributions": report, "unmet": unmet}
    (a.venv / "probe-env.json").write_text(json.dumps(out, indent=1) + "\n")
    odd = {n: r["from"] for n, r in report.items() if r["from"] not in ("bundle", "image", "linked")}
    print(json.dumps({"distributions": len(report), "unmet": len(unmet), "not the image's version": odd}))
    return 1 if any(s == "neither (check)" for s in odd.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
