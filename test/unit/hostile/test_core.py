"""The hostile-input suite, core half (issue 18 items 2-7, 10, 11): the real CLI run the way a hostile user
would, against a small world of our own (core_world.py) or the real patch tree with an empty cache, offline.
Each case is classified by support/hostile.py (clean / traceback / wrong / damaged); only clean passes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from pyenvs import PCIE_LL, clean_env, cli, fresh_env, make_venv

from support import hostile
from support.hostile import Case

from . import core_world as w
from .core_world import case, world

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
SITE = f"venv/lib/python{PY}/site-packages"
VENV_PY = "{tmp}/venv/bin/python"
BT = "{tmp}/patches/9.9.9/base.toml"
SERIES = "{tmp}/patches/9.9.9/sglang"
CACHED = f"cache/artifacts/{w.WHEEL}"


def run_cli(*args: str):
    """A step: the real CLI in this world (as the user ran it before the hostile command)."""
    def step(tmp: Path) -> None:
        env = hostile.clean_env(tmp, {k: v.replace("{tmp}", str(tmp)) for k, v in w.ENV.items()})
        argv = [a.replace("{tmp}", str(tmp)) for a in args]
        r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *argv], capture_output=True, text=True,
                           env=env, cwd=tmp, timeout=300)
        assert r.returncode == 0, f"setup step {args} failed: {r.stderr}"
    return step


def toml(key: str, value: str):
    return lambda tmp: w.set_toml(tmp, key, value)


def edit(old: str, new: str):
    return lambda tmp: w.edit_toml(tmp, old, new)


def relock(tmp: Path) -> None:
    w.relock(tmp)


def patch(**kw):
    return lambda tmp: w.write_patch(tmp, w.patch_with(**kw))


def stdout_has(*needles: str, absent: tuple[str, ...] = ()):
    def after(tmp: Path, r) -> str | None:
        out = r.stdout + r.stderr
        missing = [n for n in needles if n.replace("{tmp}", str(tmp)) not in out]
        present = [n for n in absent if n.replace("{tmp}", str(tmp)) in out]
        if missing or present:
            return f"output lacks {missing} / has {present}: {out[-800:]}"
        return None
    return after


def lock_file(tmp: Path) -> None:
    """A (hand-made, empty) lock for this Python: install without --no-deps needs one."""
    d = w.base_dir(tmp) / "locks"
    d.mkdir(exist_ok=True)
    (d / f"py{PY.replace('.', '')}.txt").write_text(
        f"# lock-schema: sglang-blackwell/lock/1\n# lock-base: 9.9.9\n# lock-python: {PY}\n"
        f"# lock-platform: manylinux_2_34_x86_64\n# lock-inputs: {'0' * 64}\n")


# ---- item 2: nccl uninstall keeps what the user appended after our block, for every file kind -------------------
def venv_with(files: dict[str, bytes] | None = None, *install: str, append: dict[str, bytes] | None = None,
              pip: bool = False):
    """setup: a real venv (site-packages files written), then `nccl install ARGS` if given, then `append`."""
    def setup(tmp: Path) -> None:
        if pip:
            subprocess.run([sys.executable, "-c", "import sys, venv; venv.main([sys.argv[1]])", str(tmp / "venv")],
                           check=True, env=clean_env())
        else:
            make_venv(tmp / "venv")
        site = tmp / SITE
        for rel, data in (files or {}).items():
            p = tmp / rel.replace("{site}", SITE)
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
        assert site.is_dir()
        if install:
            cli("nccl", "install", "--python", str(tmp / "venv/bin/python"),
                *[a.replace("{tmp}", str(tmp)) for a in install])
        for rel, data in (append or {}).items():
            p = tmp / rel.replace("{site}", SITE)
            p.write_bytes(p.read_bytes() + data)
    return setup


def file_is(rel: str, data: bytes, *, runs: str | None = None):
    """after: the file holds exactly `data`; `runs`: python code whose output must be 'ok' in the venv."""
    def after(tmp: Path, r) -> str | None:
        p = tmp / rel.replace("{site}", SITE)
        if not p.is_file():
            return f"{rel} is gone, and the user's bytes in it with it"
        got = p.read_bytes()
        if got != data:
            return f"{rel} holds {got!r}, expected {data!r}"
        if runs is not None:
            p = subprocess.run([str(tmp / "venv/bin/python"), "-c", runs], capture_output=True, text=True,
                               env=clean_env())
            if p.stdout.strip() != "ok" or "Error in sitecustomize" in p.stderr:
                return f"the user's code no longer runs: {p.stdout!r} {p.stderr[-500:]!r}"
        return None
    return after


ITEM2 = [
    case("uninstall-sitecustomize-appended-after-block", "2", ["nccl", "uninstall", "--python", VENV_PY], rc=0,
         setup=venv_with({"{site}/sitecustomize.py": b"import os\nA = 1"}, "--profile", "pcie-ll",
                         append={"{site}/sitecustomize.py": b"B = 2"}),
         after=file_is("{site}/sitecustomize.py", b"import os\nA = 1\nB = 2",
                       runs="import sitecustomize as s; print('ok' if (s.A, s.B) == (1, 2) else 'no')")),
    case("uninstall-pth-module-appended-after-block", "2", ["nccl", "uninstall", "--python", VENV_PY], rc=0,
         setup=venv_with({}, "--hook", "pth", "--profile", "pcie-ll",
                         append={"{site}/_sglang_blackwell_nccl.py": b"B = 2"}),
         after=file_is("{site}/_sglang_blackwell_nccl.py", b"B = 2",
                       runs="import _sglang_blackwell_nccl as m; print('ok' if m.B == 2 else 'no')")),
    case("uninstall-pth-file-appended-after-block", "2", ["nccl", "uninstall", "--python", VENV_PY], rc=0,
         setup=venv_with({}, "--hook", "pth", "--profile", "pcie-ll",
                         append={"{site}/sglang_blackwell_nccl.pth": b"import os; os.environ['MINE'] = '1'\n"}),
         after=file_is("{site}/sglang_blackwell_nccl.pth", b"import os; os.environ['MINE'] = '1'\n",
                       runs="import os; print('ok' if os.environ.get('MINE') == '1' else 'no')")),
    case("uninstall-nccl-conf-appended-after-block", "2", ["nccl", "uninstall", "--python", VENV_PY], rc=0,
         setup=venv_with({"nccl.conf": b"NCCL_DEBUG=WARN"}, "--profile", "pcie-ll", "--nccl-conf", "{tmp}/nccl.conf",
                         append={"nccl.conf": b"NCCL_SOCKET_IFNAME=eth0\n"}),
         after=file_is("nccl.conf", b"NCCL_DEBUG=WARN\nNCCL_SOCKET_IFNAME=eth0\n")),
]


# ---- item 3: a pin that disagrees never deletes the cached file; base.toml fields are type-checked --------------
def flip_cached(tmp: Path) -> None:
    p = tmp / CACHED
    data = bytearray(p.read_bytes())
    data[len(data) // 2] ^= 0xFF
    p.write_bytes(bytes(data))


def drop_sidecars(tmp: Path) -> None:
    for p in (tmp / "cache" / "artifacts").iterdir():
        if p.name != w.WHEEL:
            p.unlink()


ITEM3 = [
    case("wrong-sha256-pin-keeps-cache", "3", ["build", "--out", "{tmp}/dist2"], rc=3,
         setup=world(run_cli("build", "--out", "{tmp}/dist"), edit('sha256 = "', 'sha256 = "0' + "0" * 63 + '" #"'),
                     relock),
         names=(BT, "sha256", "the pin changed"), watch=(CACHED, "dist2")),
    case("wrong-size-pin-keeps-cache", "3", ["build", "--out", "{tmp}/dist2"], rc=3,
         setup=world(run_cli("build", "--out", "{tmp}/dist"), toml("size", "12")),
         names=(BT, "size", "the pin changed"), watch=(CACHED, "dist2")),
    case("size-as-string", "3", ["build", "--out", "{tmp}/dist"], setup=world(toml("size", '"5201033"')),
         names=(BT, "size", "integer"), watch=(CACHED, "dist")),
    case("cached-file-changed-since-verified", "3", ["build", "--out", "{tmp}/dist2"], rc=3,
         setup=world(run_cli("build", "--out", "{tmp}/dist"), flip_cached),
         names=(f"{{tmp}}/{CACHED}", "changed since"), watch=(CACHED, "dist2")),
    case("mismatch-without-a-record-keeps-cache", "3", ["build", "--out", "{tmp}/dist"], rc=3,
         setup=world(drop_sidecars, toml("size", "12")), names=(BT, "size", f"{{tmp}}/{CACHED}"),
         watch=(CACHED, "dist")),
]


# ---- item 4: install verifies dist/ and refreshes it; a dry run writes nothing ----------------------------------
def modify_wheel(tmp: Path) -> None:
    p = next((tmp / "dist").glob("*.whl"))
    p.write_bytes(p.read_bytes() + b"\0")


def bump_label(tmp: Path) -> None:
    w.set_toml(tmp, "local_label", '"sm120.8"')
    w.relock(tmp)


def installed_version(dist: str, version: str):
    def after(tmp: Path, r) -> str | None:
        p = subprocess.run([str(tmp / "venv/bin/python"), "-c", f"import importlib.metadata as m; "
                            f"print(m.version({dist!r}))"], capture_output=True, text=True, env=clean_env())
        if p.stdout.strip() != version:
            return f"the venv has {dist} {p.stdout.strip() or p.stderr[-300:]!r}, expected {version}"
        if not list((tmp / "dist").glob(f"*{version}*.whl")):
            return f"dist/ has no {version} wheel: {sorted(x.name for x in (tmp / 'dist').iterdir())}"
        return None
    return after


ITEM4 = [
    case("install-refuses-wheel-modified-after-build", "4",
         ["install", "--dist", "{tmp}/dist", "--no-deps", "--dry-run"], rc=3,
         setup=world(run_cli("build", "--out", "{tmp}/dist"), modify_wheel),
         names=("{tmp}/dist/sglang-0.0.1+sm120.7-py3-none-any.whl", "manifest-9.9.9.json"), watch=("dist",)),
    case("install-dry-run-stale-label-writes-nothing", "4",
         ["install", "--dist", "{tmp}/dist", "--no-deps", "--dry-run"], rc=0,
         setup=world(run_cli("build", "--out", "{tmp}/dist"), bump_label), watch=("dist",),
         after=stdout_has("sglang-0.0.1+sm120.8", absent=("sglang-0.0.1+sm120.7",))),
    case("install-dry-run-no-dist-writes-nothing", "4",
         ["install", "--dist", "{tmp}/dist", "--no-deps", "--dry-run"], rc=0, setup=world(), watch=("dist",),
         after=stdout_has("sglang-0.0.1+sm120.7")),
    case("install-dry-run-writes-no-hashes-file", "4", ["install", "--dist", "{tmp}/dist", "--dry-run"], rc=0,
         setup=world(run_cli("build", "--out", "{tmp}/dist"), lock_file), watch=("dist",),
         after=stdout_has("--require-hashes")),
    case("install-rebuilds-stale-wheels", "4",
         ["install", "--dist", "{tmp}/dist", "--no-deps", "--python-exe", VENV_PY], rc=0,
         setup=lambda tmp: (world(run_cli("build", "--out", "{tmp}/dist"), bump_label)(tmp),
                            venv_with(pip=True)(tmp)),
         after=installed_version("sglang", "0.0.1+sm120.8"), timeout=300),
]


# ---- item 5: install.sh recomputes the bundle id; --expect-id ------------------------------------------------------
INSTALL_SH = ("bash", "{tmp}/bundle/install.sh")


def bundle_setup(*steps):
    return world(run_cli("bundle", "--python", PY, "--no-kernel", "--out", "{tmp}/bundle"), *steps)


def swap_wheel_fix_manifest(tmp: Path) -> None:
    m = json.loads((tmp / "bundle/manifest.json").read_text())
    f = next(f for f in m["files"] if f["path"].endswith(".whl"))
    p = tmp / "bundle" / f["path"]
    data = p.read_bytes() + b"\0"  # another wheel (pip still reads it)
    p.write_bytes(data)
    f["sha256"], f["size"] = w.sha256(data), len(data)
    (tmp / "bundle/manifest.json").write_text(json.dumps(m, indent=1, sort_keys=True) + "\n")


def bundle_id(tmp: Path) -> str:
    return json.loads((tmp / "bundle/manifest.json").read_text())["bundle_id"]


ITEM5 = [
    Case("bundle-swapped-wheel-fixed-manifest", "5", ["--target", "{tmp}/site"], rc=4, cli=INSTALL_SH,
         setup=bundle_setup(swap_wheel_fix_manifest), names=("bundle id", "{tmp}/bundle/manifest.json"),
         watch=("site", "bundle"), env={"PYTHON": sys.executable}),
    Case("bundle-expect-id-wrong", "5", ["--target", "{tmp}/site", "--expect-id", "0123456789abcdef"], rc=4,
         cli=INSTALL_SH, setup=bundle_setup(), names=("--expect-id", "0123456789abcdef"), watch=("site", "bundle"),
         env={"PYTHON": sys.executable}),
    Case("bundle-manifest-path-leaves-the-bundle", "5", ["--target", "{tmp}/site"], rc=4, cli=INSTALL_SH,
         setup=bundle_setup(lambda tmp: (tmp / "bundle/manifest.json").write_text(
             (tmp / "bundle/manifest.json").read_text().replace('"path": "wheels/', '"path": "../wheels/'))),
         names=("{tmp}/bundle/manifest.json", "files[0]"), watch=("site", "bundle"), env={"PYTHON": sys.executable}),
    Case("bundle-expect-id-malformed", "5", ["--target", "{tmp}/site", "--expect-id", "xyz"], rc=2,
         cli=INSTALL_SH, setup=bundle_setup(), names=("--expect-id",), watch=("site", "bundle"),
         env={"PYTHON": sys.executable}),
]


def expect_id_right():
    def setup(tmp: Path) -> None:
        bundle_setup()(tmp)
        (tmp / "id").write_text(bundle_id(tmp))
    return setup


def test_bundle_expect_id_right_installs(tmp_path):
    setup = expect_id_right()
    setup(tmp_path)
    bid = (tmp_path / "id").read_text()
    c = Case("bundle-expect-id-right", "5", ["--target", "{tmp}/site", "--expect-id", bid[:16]], rc=0,
             cli=INSTALL_SH, env={"PYTHON": sys.executable},
             after=lambda tmp, r: None if list((tmp / "site").glob("sglang-*.dist-info")) else "nothing installed")
    hostile.assert_clean(c, tmp_path)


# ---- item 6: sitecustomize edge cases, for every file kind ----------------------------------------------------------
def symlinked(rel: str, real: str, data: bytes):
    def step(tmp: Path) -> None:
        r = tmp / real
        r.parent.mkdir(parents=True, exist_ok=True)
        r.write_bytes(data)
        p = tmp / rel.replace("{site}", SITE)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(r)
    return step


def read_only(rel: str):
    def step(tmp: Path) -> None:
        (tmp / rel.replace("{site}", SITE)).chmod(0o444)
    return step


def then(*steps):
    def setup(tmp: Path) -> None:
        for s in steps:
            s(tmp)
    return setup


def link_kept(rel: str, real: str, *, has_block: bool, original: bytes | None = None, env: dict | None = None):
    def after(tmp: Path, r) -> str | None:
        p = tmp / rel.replace("{site}", SITE)
        if not p.is_symlink() or Path(os.readlink(p)) != tmp / real:
            return f"{rel} is no longer the user's symlink to {real}"
        data = (tmp / real).read_bytes()
        if has_block != (b"sglang-blackwell nccl >>>" in data):
            return f"{real}: block {'missing' if has_block else 'left behind'}"
        if original is not None and data != original:
            return f"{real} holds {data!r}, expected {original!r}"
        if env is not None and fresh_env(tmp / "venv/bin/python") != env:
            return f"a fresh interpreter gets {fresh_env(tmp / 'venv/bin/python')}, expected {env}"
        return None
    return after


USER_SC = b"import os\nos.environ['USER_SC'] = '1'\n"
SC = "{site}/sitecustomize.py"
INSTALL = ["nccl", "install", "--python", VENV_PY, "--profile", "pcie-ll"]

ITEM6 = [
    case("sitecustomize-symlink-written-through", "6", INSTALL, rc=0,
         setup=then(venv_with(), symlinked(SC, "mine/sc.py", USER_SC)),
         after=link_kept(SC, "mine/sc.py", has_block=True, env=PCIE_LL)),
    case("sitecustomize-symlink-uninstall-through", "6", ["nccl", "uninstall", "--python", VENV_PY], rc=0,
         setup=then(venv_with(), symlinked(SC, "mine/sc.py", USER_SC),
                    lambda tmp: cli(*[a.replace("{tmp}", str(tmp)) for a in INSTALL])),
         after=link_kept(SC, "mine/sc.py", has_block=False, original=USER_SC)),
    case("sitecustomize-dangling-symlink", "6", INSTALL,
         setup=then(venv_with(), lambda tmp: (tmp / SITE / "sitecustomize.py").symlink_to(tmp / "gone.py")),
         names=(f"{{tmp}}/{SITE}/sitecustomize.py", "{tmp}/gone.py"), watch=(SITE,)),
    case("sitecustomize-syntax-error", "6", INSTALL,
         setup=venv_with({SC: b"import os\nif True\n    pass\n"}),
         names=(f"{{tmp}}/{SITE}/sitecustomize.py", "line 2"), watch=(SITE,)),
    case("sitecustomize-user-code-raises-nothing-left", "6", INSTALL,
         setup=venv_with({SC: b"raise ImportError('the user broke it')\n"}),
         names=(f"{{tmp}}/{SITE}/sitecustomize.py", "nothing was changed"), watch=(SITE,)),
    case("sitecustomize-read-only", "6", INSTALL, setup=then(venv_with({SC: USER_SC}), read_only(SC)),
         names=(f"{{tmp}}/{SITE}/sitecustomize.py", "read-only"), watch=(SITE,)),
    case("sitecustomize-is-a-directory", "6", INSTALL,
         setup=then(venv_with(), lambda tmp: (tmp / SITE / "sitecustomize.py").mkdir()),
         names=(f"{{tmp}}/{SITE}/sitecustomize.py", "directory"), watch=(SITE,)),
    case("sitecustomize-not-utf8-is-kept-byte-exact", "6", ["nccl", "uninstall", "--python", VENV_PY], rc=0,
         setup=venv_with({SC: b"# -*- coding: latin-1 -*-\nX = '\xe9'\n"}, "--profile", "pcie-ll"),
         after=file_is(SC, b"# -*- coding: latin-1 -*-\nX = '\xe9'\n")),
    case("pth-module-read-only", "6", [*INSTALL[:-2], "--hook", "pth", "--profile", "none"],
         setup=then(venv_with({}, "--hook", "pth", "--profile", "pcie-ll"),
                    read_only("{site}/_sglang_blackwell_nccl.py")),
         names=(f"{{tmp}}/{SITE}/_sglang_blackwell_nccl.py", "read-only"), watch=(SITE,)),
    case("pth-module-syntax-error", "6", [*INSTALL[:-2], "--hook", "pth", "--profile", "none"],
         setup=venv_with({}, "--hook", "pth", "--profile", "pcie-ll",
                         append={"{site}/_sglang_blackwell_nccl.py": b"def broken(:\n"}),
         names=(f"{{tmp}}/{SITE}/_sglang_blackwell_nccl.py", "syntax"), watch=(SITE,)),
    case("nccl-conf-symlink-written-through", "6", [*INSTALL, "--nccl-conf", "{tmp}/nccl.conf"], rc=0,
         setup=then(venv_with(), symlinked("nccl.conf", "mine/nccl.conf", b"NCCL_DEBUG=WARN\n")),
         after=link_kept("nccl.conf", "mine/nccl.conf", has_block=True)),
    case("nccl-conf-read-only", "6", [*INSTALL, "--nccl-conf", "{tmp}/nccl.conf"],
         setup=then(venv_with({"nccl.conf": b"NCCL_DEBUG=WARN\n"}), read_only("nccl.conf")),
         names=("{tmp}/nccl.conf", "read-only"), watch=(SITE, "nccl.conf")),
    case("nccl-conf-empty-path", "6", [*INSTALL, "--nccl-conf", ""], setup=venv_with(), names=("--nccl-conf",),
         watch=(SITE,)),
    case("nccl-conf-parent-is-a-file", "6", [*INSTALL, "--nccl-conf", "{tmp}/afile/nccl.conf"],
         setup=then(venv_with(), lambda tmp: (tmp / "afile").write_text("x")), names=("--nccl-conf", "{tmp}/afile"),
         watch=(SITE, "afile")),
]


# ---- item 7: build / bundle / install refuse a series that fails the DEP-3 or label checks ---------------------
ITEM7 = [
    case("build-no-upstream-status", "7", ["build", "--out", "{tmp}/dist"],
         setup=world(patch(fields={"Upstream-Status": None}), relock), names=(w.PATCH, "Upstream-Status"),
         watch=("dist",)),
    case("build-upstream-status-typo", "7", ["build", "--out", "{tmp}/dist"],
         setup=world(patch(fields={"Upstream-Status": "Pendng"}), relock), names=(w.PATCH, "Upstream-Status", "Pendng"),
         watch=("dist",)),
    case("build-label-not-locked", "7", ["build", "--out", "{tmp}/dist"],
         setup=world(patch(body="The gate forgot SM12x; accept it. Now with more words.")),
         names=("LABEL.lock", "sm120.7"), watch=("dist",)),
    case("bundle-no-upstream-status", "7", ["bundle", "--python", PY, "--no-kernel", "--out", "{tmp}/bundle"],
         setup=world(patch(fields={"Upstream-Status": None}), relock), names=(w.PATCH, "Upstream-Status"),
         watch=("bundle",)),
    case("install-bad-last-update", "7", ["install", "--dist", "{tmp}/dist", "--no-deps", "--dry-run"],
         setup=world(patch(fields={"Last-Update": "yesterday"}), relock), names=(w.PATCH, "Last-Update"),
         watch=("dist",)),
    case("install-built-then-header-broken", "7", ["install", "--dist", "{tmp}/dist", "--no-deps", "--dry-run"],
         setup=world(run_cli("build", "--out", "{tmp}/dist"), patch(fields={"Origin": None}), relock),
         names=(w.PATCH, "Origin"), watch=("dist",)),
]


# ---- item 10: the smaller ones --------------------------------------------------------------------------------------
def dead_partial(tmp: Path) -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    d = tmp / "cache" / ".partial" / f"{w.WHEEL}.{p.pid}.x1y2z3"
    (d / "got").mkdir(parents=True)
    (d / "got" / w.WHEEL).write_bytes(b"half a wheel")


def partial_swept(tmp: Path, r) -> str | None:
    left = [str(p) for p in (tmp / "cache" / ".partial").rglob("*")] if (tmp / "cache/.partial").exists() else []
    return f"left behind: {left}" if left else None


def dotdot_patch(tmp: Path) -> None:
    text = w.patch_with()
    diff = ("diff --git a/python/sglang/../../evil.py b/python/sglang/../../evil.py\n"
            "new file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/python/sglang/../../evil.py\n"
            "@@ -0,0 +1 @@\n+EVIL = 1\n")
    w.write_patch(tmp, text[:text.index("diff --git")] + diff)
    w.relock(tmp)


def checkout(tmp: Path) -> None:
    run_cli("checkout", "--package", "sglang", "{tmp}/co")(tmp)


def git(tmp: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(tmp / "co"), "-c", "user.name=u", "-c", "user.email=u@example.invalid", *args],
                   check=True, capture_output=True)


def new_untracked(tmp: Path) -> None:
    (tmp / "co/python/sglang/new_module.py").write_text("X = 1\n")


def commit_without_body(tmp: Path) -> None:
    (tmp / "co/python/sglang/gate.py").write_text((tmp / "co/python/sglang/gate.py").read_text() + "# more\n")
    git(tmp, "commit", "-qam", "gate: one more comment")


def marker_kept_files_gone(tmp: Path) -> None:
    env = dict(os.environ, PYTHON=sys.executable)
    subprocess.run(["bash", str(tmp / "bundle/install.sh"), "--target", str(tmp / "site")], check=True, env=env,
                   capture_output=True)
    shutil.rmtree(tmp / "site" / "sglang")


def reinstalled(tmp: Path, r) -> str | None:
    return None if (tmp / "site/sglang/gate.py").is_file() else f"not reinstalled: {r.stdout[-500:]}"


ITEM10 = [
    Case("build-python-3.99-real-tree", "10", ["build", "--base", "0.5.14", "--python", "3.99", "--out", "{tmp}/dist"],
         names=("--python 3.99",), watch=("dist", "cache")),
    case("killed-download-partial-swept", "10", ["build", "--out", "{tmp}/dist"], rc=0, setup=world(dead_partial),
         after=partial_swept),
    case("patch-path-dotdot-build", "10", ["build", "--out", "{tmp}/dist"], setup=world(dotdot_patch),
         names=(w.PATCH, "python/sglang/../../evil.py"), watch=("dist",)),
    case("patch-path-dotdot-check", "10", ["check"], rc=1, setup=world(dotdot_patch),
         names=(w.PATCH, "python/sglang/../../evil.py"),
         after=stdout_has(absent=("evil.py: applies", "patch: applies"))),
    case("export-untracked-new-file", "10", ["export", "{tmp}/co"], setup=world(checkout, new_untracked),
         names=("python/sglang/new_module.py", "git add"), watch=("patches",)),
    case("export-commit-without-body", "10", ["export", "{tmp}/co"], setup=world(checkout, commit_without_body),
         names=("gate: one more comment", "body"), watch=("patches",)),
    case("default-false-as-string", "10", ["build", "--out", "{tmp}/dist"], setup=world(toml("default", '"false"')),
         names=(BT, "default", "true or false"), watch=("dist",)),
    Case("install-sh-marker-but-files-gone", "10", ["--target", "{tmp}/site"], rc=0, cli=INSTALL_SH,
         setup=bundle_setup(marker_kept_files_gone), env={"PYTHON": sys.executable}, after=reinstalled),
]


# ---- item 11: no tracebacks ---------------------------------------------------------------------------------------
def write(rel: str, data: bytes | str):
    def step(tmp: Path) -> None:
        p = tmp / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data.encode() if isinstance(data, str) else data)
    return step


def make_dir(rel: str):
    def step(tmp: Path) -> None:
        p = tmp / rel
        if p.is_file():
            p.unlink()
        p.mkdir(parents=True)
    return step


def remove(rel: str):
    return lambda tmp: (shutil.rmtree if (tmp / rel).is_dir() else Path.unlink)(tmp / rel)


LL = "patches/9.9.9/LABEL.lock"
MF = "dist/manifest-9.9.9.json"
BUILD = ["build", "--out", "{tmp}/dist"]
DRY = ["install", "--dist", "{tmp}/dist", "--no-deps", "--dry-run"]
built = run_cli("build", "--out", "{tmp}/dist")

ITEM11 = [
    # base.toml types
    case("toml-local-label-int", "11", BUILD, setup=world(toml("local_label", "7")), names=(BT, "local_label"),
         watch=("dist",)),
    case("toml-sha256-int", "11", BUILD, setup=world(edit('sha256 = "', 'sha256 = 1 #"')), names=(BT, "sha256"),
         watch=("dist",)),
    case("toml-absorbed-int", "11", BUILD, setup=world(edit('cuda = "13.0"', 'cuda = "13.0"\nabsorbed = 3')),
         names=(BT, "absorbed"), watch=("dist",)),
    case("toml-requires-rewrite-int", "11", BUILD,
         setup=world(edit('version = "0.0.1"', 'version = "0.0.1"\nrequires_rewrite = 3')),
         names=(BT, "requires_rewrite"), watch=("dist",)),
    case("toml-patched-a-table", "11", BUILD,
         setup=world(edit("[[patched]]", "[patched]"), edit("[[patched.files]]", "[patched.files]")),
         names=(BT, "patched"), watch=("dist",)),
    case("toml-files-a-table", "11", BUILD, setup=world(edit("[[patched.files]]", "[patched.files]")),
         names=(BT, "files"), watch=("dist",)),
    case("toml-version-float", "11", BUILD, setup=world(edit('version = "0.0.1"', "version = 0.1")),
         names=(BT, "version"), watch=("dist",)),
    case("toml-unknown-key", "11", BUILD, setup=world(edit("default = true", "default = true\ndefualt = true")),
         names=(BT, "defualt"), watch=("dist",)),
    case("toml-not-utf8", "11", BUILD, setup=world(lambda tmp: w.base_toml(tmp).write_bytes(
        w.base_toml(tmp).read_bytes() + b"# caf\xe9\n")), names=(BT, "UTF-8"), watch=("dist",)),
    case("toml-runtime-files-not-a-list", "11", BUILD, setup=world(lambda tmp: w.base_toml(tmp).write_text(
        w.base_toml(tmp).read_text() + '\n[[runtime]]\nname = "x"\nversion = "1"\nindex_url = ""\n'
                                       'requirement = ""\nfiles = "x.whl"\n')), names=(BT, "files"),
         watch=("dist",)),
    case("toml-serving-flags-string", "11", BUILD, setup=world(lambda tmp: w.base_toml(tmp).write_text(
        w.base_toml(tmp).read_text() + '\n[serving]\nfusion_on_flags = "--x"\n')), names=(BT, "fusion_on_flags"),
         watch=("dist",)),
    # malformed --python and other argument values
    case("build-python-abc", "11", ["build", "--python", "abc", "--out", "{tmp}/dist"], setup=world(),
         names=("--python", "abc"), watch=("dist",)),
    case("build-python-empty", "11", ["build", "--python", "", "--out", "{tmp}/dist"], setup=world(),
         names=("--python",), watch=("dist",)),
    case("lock-python-empty", "11", ["lock", "--check", "--python", ""], setup=world(), names=("--python",)),
    case("bundle-python-3", "11", ["bundle", "--python", "3", "--no-kernel", "--out", "{tmp}/bundle"],
         setup=world(), names=("--python",), watch=("bundle",)),
    case("bundle-chunk-nan", "11", ["bundle", "--python", PY, "--no-kernel", "--chunk-mib", "nan", "--out",
                                    "{tmp}/bundle"], setup=world(), names=("--chunk-mib", "nan"), watch=("bundle",)),
    case("bundle-chunk-negative", "11", ["bundle", "--python", PY, "--no-kernel", "--chunk-mib", "-1", "--out",
                                         "{tmp}/bundle"], setup=world(), names=("--chunk-mib",), watch=("bundle",)),
    case("install-python-exe-missing", "11", ["install", "--python-exe", "{tmp}/nope/python", "--dry-run",
                                              "--no-deps"], setup=world(), names=("--python-exe", "{tmp}/nope/python")),
    case("build-unknown-flag", "11", ["build", "--frobnicate"], setup=world(), names=("--frobnicate",)),
    case("nccl-bad-action", "11", ["nccl", "reinstall"], setup=world(), names=("reinstall",)),
    # odd filesystem states
    case("build-out-is-a-file", "11", BUILD, setup=world(write("dist", "x")), names=("--out", "{tmp}/dist"),
         watch=("dist",)),
    case("build-out-parent-is-a-file", "11", ["build", "--out", "{tmp}/afile/dist"],
         setup=world(write("afile", "x")), names=("--out", "{tmp}/afile"), watch=("afile",)),
    case("cache-is-a-file", "11", BUILD, setup=world(remove("cache"), write("cache", "x")),
         env={"SGLANG_BLACKWELL_CACHE": "{tmp}/cache"}, names=("{tmp}/cache",), watch=("cache", "dist")),
    case("cache-entry-is-a-directory", "11", BUILD, setup=world(remove(CACHED), make_dir(CACHED)),
         names=(f"{{tmp}}/{CACHED}",), watch=("cache", "dist")),
    case("label-lock-is-a-directory", "11", ["label", "status"], setup=world(remove(LL), make_dir(LL)), rc=1,
         names=(f"{{tmp}}/{LL}",)),
    case("label-lock-a-directory-lock", "11", ["label", "lock"], setup=world(remove(LL), make_dir(LL)),
         names=(f"{{tmp}}/{LL}",), watch=("patches",)),
    case("manifest-is-a-directory", "11", DRY, setup=world(built, remove(MF), make_dir(MF)),
         names=(f"{{tmp}}/{MF}",), watch=("dist",)),
    case("install-dist-is-a-file", "11", DRY, setup=world(write("dist", "x")), names=("{tmp}/dist",),
         watch=("dist",)),
    case("checkout-dest-is-a-file", "11", ["checkout", "--package", "sglang", "{tmp}/co"],
         setup=world(write("co", "x")), names=("{tmp}/co",), watch=("co",)),
    case("index-dir-is-a-file", "11", ["index", "{tmp}/idx", "--dist", "{tmp}/dist"],
         setup=world(built, write("idx", "x")), names=("{tmp}/idx",), watch=("idx", "dist")),
    case("changelog-out-is-a-directory", "11", ["changelog", "--out", "{tmp}/d"], setup=world(make_dir("d")),
         names=("{tmp}/d",), watch=("d",)),
    case("lock-python-exe-missing", "11", ["lock", "--python", PY, "--python-exe", "{tmp}/nope/python"],
         setup=world(), names=("--python-exe", "{tmp}/nope/python"), watch=("patches",)),
    Case("install-sh-target-is-a-file", "11", ["--target", "{tmp}/afile"], cli=INSTALL_SH,
         setup=bundle_setup(write("afile", "x")), names=("--target", "{tmp}/afile"), watch=("afile", "bundle"),
         env={"PYTHON": sys.executable}),
    Case("install-sh-stage-is-a-file", "11", ["--stage", "{tmp}/afile", "--stage-only"], cli=INSTALL_SH,
         setup=bundle_setup(write("afile", "x")), names=("--stage", "{tmp}/afile"), watch=("afile", "bundle"),
         env={"PYTHON": sys.executable}),
    Case("install-sh-python-missing", "11", ["--target", "{tmp}/site", "--python", "{tmp}/nope/python"],
         cli=INSTALL_SH, setup=bundle_setup(), names=("--python", "{tmp}/nope/python"), watch=("site", "bundle"),
         env={"PYTHON": sys.executable}),
    Case("install-sh-python-not-python", "11", ["--target", "{tmp}/site", "--python", "/bin/true"],
         cli=INSTALL_SH, setup=bundle_setup(), names=("--python", "/bin/true"), watch=("site", "bundle"),
         env={"PYTHON": sys.executable}),
    case("bundle-kernel-wheel-not-a-wheel", "11", ["bundle", "--python", PY, "--kernel-wheel", "{tmp}/afile",
                                                   "--out", "{tmp}/bundle"], setup=world(write("afile", "x")),
         names=("--kernel-wheel", "{tmp}/afile"), watch=("bundle",)),
    case("lock-python-exe-fails-loudly", "11", ["lock", "--python", PY, "--python-exe", "{tmp}/fakepy"],
         setup=world(write("fakepy", "#!/bin/sh\necho one >&2\necho two >&2\nexit 3\n"),
                     lambda tmp: (tmp / "fakepy").chmod(0o755)), names=("--python-exe", "{tmp}/fakepy", "exit 3"),
         watch=("patches",)),
    case("export-path-too-long", "11", ["export", "{tmp}/" + "a" * 300], setup=world(), names=("longer than",)),
    case("patch-with-crlf-line-ends", "11", ["check"], setup=world(lambda tmp: w.write_patch(
        tmp, w.patch_with().replace("\n", "\r\n"))), names=(w.PATCH, "CRLF")),
    # non-UTF-8 files
    case("series-not-utf8", "11", BUILD, setup=world(write("patches/9.9.9/sglang/series", b"\xff\xfe0001\n")),
         names=("{tmp}/patches/9.9.9/sglang/series", "UTF-8"), watch=("dist",)),
    case("label-lock-not-utf8", "11", ["check"], setup=world(write(LL, b"\xff")), rc=1, names=(f"{{tmp}}/{LL}",)),
    case("installed-list-not-utf8", "11", ["bundle", "--python", PY, "--no-kernel", "--installed", "{tmp}/i.txt",
                                           "--out", "{tmp}/bundle"], setup=world(write("i.txt", b"\xff\xfe")),
         names=("{tmp}/i.txt",), watch=("bundle",)),
    case("lock-file-not-utf8", "11", ["lock", "--check", "--python", PY],
         setup=world(write(f"patches/9.9.9/locks/py{PY.replace('.', '')}.txt", b"\xff")),
         names=(f"{{tmp}}/patches/9.9.9/locks/py{PY.replace('.', '')}.txt",)),
    case("profiles-not-utf8", "11", ["nccl", "show", "--profiles", "{tmp}/p.toml"],
         setup=world(write("p.toml", b"\xff")), names=("{tmp}/p.toml",)),
    case("report-update-not-utf8", "11", ["report", "--update", "{tmp}/r.md"], setup=world(write("r.md", b"\xff")),
         names=("{tmp}/r.md",), watch=("r.md",)),
    # corrupt JSON state files
    case("manifest-not-json", "11", DRY, setup=world(built, write(MF, "{")), names=(f"{{tmp}}/{MF}",),
         watch=("dist",)),
    case("manifest-a-list", "11", DRY, setup=world(built, write(MF, "[]")), names=(f"{{tmp}}/{MF}",),
         watch=("dist",)),
    case("manifest-wheels-wrong-shape", "11", DRY, setup=world(built, lambda tmp: (tmp / MF).write_text(
        (tmp / MF).read_text().replace('"wheels": [', '"wheels": [3, '))), names=(f"{{tmp}}/{MF}",),
         watch=("dist",)),
    case("manifest-not-utf8", "11", DRY, setup=world(built, write(MF, b"\xff")), names=(f"{{tmp}}/{MF}",),
         watch=("dist",)),
    case("checkout-state-not-json", "11", ["export", "{tmp}/co"],
         setup=world(checkout, write("co/.git/sglang-blackwell.json", "{")),
         names=("{tmp}/co/.git/sglang-blackwell.json",), watch=("patches",)),
    case("checkout-state-a-list", "11", ["export", "{tmp}/co"],
         setup=world(checkout, write("co/.git/sglang-blackwell.json", "[]")),
         names=("{tmp}/co/.git/sglang-blackwell.json",), watch=("patches",)),
    case("label-lock-label-not-a-label", "11", ["label", "lock"],
         setup=world(write(LL, '[labels."sm120.x"]\ninputs = "a"\n')), names=(f"{{tmp}}/{LL}", "sm120.x"),
         watch=("patches",)),
    case("label-lock-entry-not-a-table", "11", ["label", "status"], rc=1,
         setup=world(write(LL, '[labels]\n"sm120.7" = 5\n')), names=(f"{{tmp}}/{LL}", "sm120.7")),
    case("cache-record-not-json", "11", BUILD, rc=0,
         setup=world(built, lambda tmp: [p.write_text("{") for p in (tmp / "cache/artifacts").iterdir()
                                         if p.name != w.WHEEL]), watch=(CACHED,)),
    case("bundle-marker-not-json", "11", ["--target", "{tmp}/site"], rc=0, cli=INSTALL_SH,
         setup=bundle_setup(write("site/.sglang-blackwell-bundle.json", "{")), env={"PYTHON": sys.executable},
         after=reinstalled),
    # unknown template placeholders
    case("index-template-unknown-placeholder", "11", ["index", "{tmp}/idx", "--dist", "{tmp}/dist", "--url-template",
                                                      "https://x/{file}{x}"], setup=world(built),
         names=("--url-template", "{x}"), watch=("idx",)),
    case("index-template-lone-brace", "11", ["index", "{tmp}/idx", "--dist", "{tmp}/dist", "--url-template",
                                             "https://x/{file}{"], setup=world(built), names=("--url-template",),
         watch=("idx",)),
    case("index-template-positional", "11", ["index", "{tmp}/idx", "--dist", "{tmp}/dist", "--url-template",
                                             "https://x/{file}/{0}"], setup=world(built), names=("--url-template",),
         watch=("idx",)),
    case("index-not-a-wheel-name", "11", ["index", "{tmp}/idx", "--dist", "{tmp}/d"],
         setup=world(write("d/bad.whl", "x")), names=("{tmp}/d/bad.whl",), watch=("idx",)),
]

# read-only directories: root ignores permission bits, so as root a read-only bind mount in a private mount
# namespace makes them read-only for real (as in test/unit/box/test_nccl_hook.py); otherwise chmod
CLI = (sys.executable, "-m", "sglang_blackwell.cli")


def read_only_dir(rel: str) -> tuple[tuple[str, ...], object]:
    """(the command prefix under which {tmp}/rel is read-only, a setup step), or pytest.skip."""
    if os.geteuid() != 0:
        return CLI, lambda tmp: (tmp / rel).chmod(0o555)
    if not shutil.which("unshare") or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode:
        pytest.skip("running as root without mount namespaces: cannot make a directory read-only")
    return ("unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"',
            f"{{tmp}}/{rel}", *CLI), lambda tmp: None


def test_build_out_read_only(tmp_path):
    cli_, step = read_only_dir("dist")
    hostile.assert_clean(case("build-out-read-only", "11", BUILD, cli=cli_, setup=world(make_dir("dist"), step),
                              names=("--out", "{tmp}/dist", "cannot write"), watch=("dist",)), tmp_path)


def test_read_only_cache_still_builds(tmp_path):
    """A warm cache mounted read-only (a shared CI cache) is still a cache: nothing needs writing there."""
    cli_, step = read_only_dir("cache")
    hostile.assert_clean(case("cache-read-only-builds", "11", BUILD, rc=0, cli=cli_, setup=world(step),
                              watch=("cache",)), tmp_path)


CASES = ITEM2 + ITEM3 + ITEM4 + ITEM5 + ITEM6 + ITEM7 + ITEM10 + ITEM11


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_hostile(c: Case, tmp_path: Path):
    hostile.assert_clean(c, tmp_path)


def test_case_ids_unique_and_items_covered():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    assert {c.item for c in CASES} >= {"2", "3", "4", "5", "6", "7", "10", "11"}
