"""`sglang-blackwell image`: what the serving image (docker/Dockerfile) and the workflows need from the tool.

  facts   the default base, the bases, the pinned CUDA image and its Python: what workflows read instead of
          repeating pins (`--get KEY`, or `--github-output` lines for $GITHUB_OUTPUT)
  check   no drift between base.toml and the Dockerfile / install script / workflows (pins.py); --release
          also refuses an unpinned CUDA image and unlocked labels
  labels  OCI labels from a build manifest: base versions, patch series hashes, the manifest's sha256
  verify  an installed environment is what the build manifest says: our wheels with their series, the CUDA
          runtime wheels, FlashInfer's AOT slots with SASS for the archs, the NCCL startup block
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .. import procs
from ..artifacts.build import manifest_path
from ..errors import UserError
from ..patchset.bases import Base, list_bases
from ..paths import patches_dir, repo_root
from .dockerfile import load_dockerfile

LABEL_NS = "io.github.sglang-blackwell"


def checkout_root() -> Path:
    root = repo_root()
    if root is None:
        raise UserError("this needs a sglang-blackwell checkout (docker/, .github/, patches/): run it from one")
    return root


def facts(root: Path | None = None) -> dict:
    """What the workflows need; the CUDA image only where a checkout (docker/Dockerfile) is present."""
    bases = list_bases(patches_dir())
    out: dict = {"default_base": next(b.name for b in bases if b.default), "bases": [b.name for b in bases]}
    root = root or repo_root()
    if root is not None and (root / "docker" / "Dockerfile").is_file():
        df = load_dockerfile(root)
        img = df.cuda_image
        out.update(cuda_image=img.ref, cuda_image_pinned=img.pinned, image_python=img.python,
                   cuda_archs=df.arg("CUDA_ARCHS"), aot_modules=df.arg("AOT_MODULES"),
                   nccl_profile=df.arg("NCCL_PROFILE"))
    return out


def read_manifest(base: Base, dist: Path) -> tuple[dict, str]:
    path = manifest_path(dist, base)
    if not path.is_file():
        raise UserError(f"{path}: no build manifest (run `sglang-blackwell build --base {base.name} --out {dist}`)")
    data = path.read_bytes()
    return json.loads(data), hashlib.sha256(data).hexdigest()


def image_labels(base: Base, dist: Path) -> dict[str, str]:
    """OCI labels for an image built from `dist` (its build manifest)."""
    m, digest = read_manifest(base, dist)
    ns = LABEL_NS
    labels = {f"{ns}.base": m["base"], f"{ns}.local-label": m["local_label"], f"{ns}.cuda": m["cuda"],
              f"{ns}.manifest-sha256": digest}
    for p in m["packages"]:
        d = p["distribution"]
        labels[f"{ns}.{d}.version"] = p["local_version"]
        labels[f"{ns}.{d}.upstream"] = p["version"]
        labels[f"{ns}.{d}.series-sha256"] = p["series_sha256"]
        labels[f"{ns}.{d}.patches"] = ",".join(f"{q['logical_id']}:{q['sha256'][:12]}" for q in p["patches"])
        for w in p["wheels"]:
            if w.get("aot"):
                a = w["aot"]
                labels[f"{ns}.{d}.aot"] = f"{','.join(a['modules'])}@{' '.join(a['archs'])}"
    for r in m["runtime"]:
        if r["requirement"]:
            labels[f"{ns}.runtime.{r['name']}"] = r["version"]
    return labels


_PROBE = """
import importlib.metadata as md, json, sys
out = {}
for d in sys.argv[1:]:
    try:
        dist = md.distribution(d)
    except md.PackageNotFoundError:
        out[d] = None
        continue
    out[d] = {"version": dist.version, "marker": dist.read_text("sglang_blackwell.json"),
              "location": str(dist.locate_file(""))}
print(json.dumps(out))
"""


def _installed(python: str, dists: list[str]) -> dict:
    r = procs.run([python, "-c", _PROBE, *dists], capture_output=True, text=True)
    if r.returncode != 0:
        raise UserError(f"{python}: cannot inspect its environment: {r.stderr.strip()[-300:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def verify(base: Base, dist: Path, python: str, *, nccl_profile: str | None = None,
           aot_archs: tuple[str, ...] | None = None, cuda_wheels: bool = True) -> list[str]:
    """Problems (empty: none) with the environment of `python` against dist's build manifest."""
    from ..artifacts.aot import sass_name
    from ..artifacts.fatbin import read_cuda_binary

    m, _ = read_manifest(base, dist)
    probs: list[str] = []
    runtime = {r["name"]: r for r in m["runtime"] if r["requirement"]}
    names = [p["distribution"] for p in m["packages"]] + (list(runtime) if cuda_wheels else [])
    have = _installed(python, names)
    for p in m["packages"]:
        d, got = p["distribution"], have.get(p["distribution"])
        if got is None:
            probs.append(f"{d}: not installed in {python}")
            continue
        if got["version"] != p["local_version"]:
            probs.append(f"{d}: {got['version']} installed, the manifest says {p['local_version']}")
            continue
        marker = json.loads(got["marker"] or "{}")
        if marker.get("series_sha256") != p["series_sha256"]:
            probs.append(f"{d}: installed wheel has series {marker.get('series_sha256')}, manifest "
                         f"{p['series_sha256']}")
        aot = next((w["aot"] for w in p["wheels"] if w.get("aot")), None)
        if aot_archs is not None and p["package"] == "flashinfer":
            if aot is None:
                probs.append(f"{d}: the manifest has no AOT modules, {' '.join(aot_archs)} were asked for")
            elif sorted(aot["archs"]) != sorted(aot_archs):
                probs.append(f"{d}: AOT modules are for {aot['archs']}, not {list(aot_archs)}")
        if aot is not None:
            if marker.get("aot", {}).get("modules", {}).keys() != aot["modules"].keys():
                probs.append(f"{d}: the installed wheel's AOT modules differ from the manifest's")
            for name, rec in aot["modules"].items():
                so = Path(got["location"]) / rec["path"]
                if not so.is_file():
                    probs.append(f"{d}: AOT module {name} missing at {so}")
                    continue
                sass = read_cuda_binary(so).sass_names()
                lacking = [sass_name(a) for a in aot["archs"] if sass_name(a) not in sass]
                if lacking:
                    probs.append(f"{d}: AOT module {so} lacks SASS for {lacking} (has {sass})")
    for name, r in runtime.items() if cuda_wheels else ():
        got = have.get(name)
        if got is None:
            probs.append(f"{name}: not installed (base {base.name} runs {r['requirement']})")
        elif not _satisfies(got["version"], r["version"]):
            probs.append(f"{name}: {got['version']} installed, base {base.name} pins {r['version']}")
    if nccl_profile is not None:
        from ..box.nccl_hook import state

        st = state(python)
        act = st["active"]
        if act is None:
            probs.append(f"NCCL: no managed startup block active in {python} (sglang-blackwell nccl install)")
        elif act["profile"] != nccl_profile:
            probs.append(f"NCCL: the active block applies profile {act['profile']}, not {nccl_profile}")
        probs += [f"NCCL: {p}" for p in st["problems"]]
    return probs


def _satisfies(installed: str, pinned: str) -> bool:
    """`torch==2.11.0` with the cu130 index installs 2.11.0+cu130 (pip prefers the local build): a pin without a
    local label accepts any; a pin with one (2.9.1+cu130) must match exactly."""
    from packaging.version import InvalidVersion, Version

    try:
        got, want = Version(installed), Version(pinned)
    except InvalidVersion:
        return installed == pinned
    return got == want if want.local else got.public == want.public


def format_labels(labels: dict[str, str], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(labels, indent=1, sort_keys=True) + "\n"
    return "".join(f"{k}={v}\n" for k, v in sorted(labels.items()))


def format_facts(f: dict, get: str | None, github_output: bool) -> str:
    if get:
        if get not in f:
            raise UserError(f"--get {get}: unknown fact (known: {', '.join(f)})")
        v = f[get]
        return (json.dumps(v) if isinstance(v, (list, dict, bool)) else str(v)) + "\n"
    if github_output:
        return "".join(f"{k}={json.dumps(v) if isinstance(v, (list, dict, bool)) else v}\n" for k, v in f.items())
    return json.dumps(f, indent=1) + "\n"
