"""The hostile-input suite, installer and index half: the bundle's install.sh / install_bundle.py (what runs on the
target is covered by the bundle id and checked before it runs; --stage and --target write through no planted
link) and `sglang-blackwell index` (only regular files that are wheels of the build manifest, with its hashes;
nothing truncated under a final name). Each case runs the real command in a fresh process, in the small world of
core_world.py, and is classified by support/hostile.py (clean / traceback / wrong / damaged); only clean passes.

The pre-check: `sglang-blackwell bundle` prints `check first: (cd DIR && printf ... | sha256sum -c) && bash
DIR/install.sh --expect-id ID ...`. The cases that attack the installer run exactly that (check.sh, written from
the printed line); where a run printed no such line (the code before this fix), check.sh runs install.sh alone,
which is what the documentation then called the check an attacker cannot pass."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from support import hostile
from support.hostile import Case
from support.wheel_world import make_wheel

from . import core_world as w

PY = f"{sys.version_info.major}.{sys.version_info.minor}"
ENV = dict(w.ENV, PYTHON=sys.executable)
CHECKED = ("bash", "{tmp}/check.sh")  # the printed pre-check, then install.sh with the arguments of the case
INSTALL_SH = ("bash", "{tmp}/bundle/install.sh")
OUTSIDE = "outside.txt"  # a file of the user's that no command here may touch
OUTSIDE_DIR = "outside"
PWNED = "pwned"  # what planted code would create


def _env(tmp: Path) -> dict[str, str]:
    return hostile.clean_env(tmp, {k: v.replace("{tmp}", str(tmp)) for k, v in ENV.items()})


def _cli(tmp: Path, *args: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", *args], capture_output=True, text=True,
                       env=_env(tmp), cwd=tmp, timeout=300)
    assert r.returncode == 0, f"setup step {args} failed: {r.stderr}"
    return r


def bundle_id(tmp: Path) -> str:
    return json.loads((tmp / "bundle/manifest.json").read_text())["bundle_id"]


def staged(tmp: Path) -> Path:
    return tmp / "stage" / bundle_id(tmp)[:16]


def world(*steps):
    """setup: the world, its bundle (the real `bundle` command; its output kept), check.sh, then each step."""
    def setup(tmp: Path) -> None:
        w.make(tmp)
        out = _cli(tmp, "bundle", "--python", PY, "--no-kernel", "--out", str(tmp / "bundle")).stdout
        (tmp / "bundle.out").write_text(out)
        m = re.search(r"^check first: (.*) && bash (\S+)/install\.sh --expect-id ([0-9a-f]+)", out, re.M)
        check = m[1] if m else ""
        (tmp / "check.sh").write_text(f"set -e\n{check}\nexec bash {tmp}/bundle/install.sh \"$@\"\n")
        (tmp / OUTSIDE).write_text("precious\n")
        (tmp / OUTSIDE_DIR).mkdir()
        (tmp / OUTSIDE_DIR / "keep.txt").write_text("mine\n")
        for s in steps:
            s(tmp)
    return setup


def expect_id(tmp: Path) -> str:
    return bundle_id(tmp)[:16]


def edit_file(rel: str, old: str, new: str):
    def step(tmp: Path) -> None:
        p = tmp / rel
        text = p.read_text()
        assert old in text, f"{old!r} not in {p}"
        p.write_text(text.replace(old, new.replace("{tmp}", str(tmp)), 1))
    return step


def swap_wheel(tmp: Path) -> None:
    """Another sglang wheel (its gate.py changed) where the bundle's was; the manifest left as it is."""
    m = json.loads((tmp / "bundle/manifest.json").read_text())
    p = tmp / "bundle" / next(f["path"] for f in m["files"] if f["path"].endswith(".whl"))
    rewrite_member(p, "sglang/gate.py", b"EVIL = True\n")


def rewrite_member(p: Path, member: str, data: bytes) -> None:
    with zipfile.ZipFile(p) as z:
        items = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(p, "w") as z:
        for i, d in items:
            z.writestr(i, data if i.filename == member else d)


def symlink(rel: str, to: str):
    def step(tmp: Path) -> None:
        p = tmp / (rel.replace("{id}", expect_id(tmp)) if "{id}" in rel else rel)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.symlink_to(tmp / to)
    return step


def installed_with_gate(text: bytes | None):
    def after(tmp: Path, r) -> str | None:
        gate = tmp / "site/sglang/gate.py"
        if text is None:
            return None if not gate.exists() else "something was installed"
        return None if gate.is_file() and text in gate.read_bytes() else f"not installed: {r.stdout[-400:]}"
    return after


def stdout_has(*needles: str):
    def after(tmp: Path, r) -> str | None:
        missing = [n for n in needles if n.replace("{tmp}", str(tmp)) not in r.stdout + r.stderr]
        return f"output lacks {missing}: {(r.stdout + r.stderr)[-600:]}" if missing else None
    return after


def both(*checks):
    def after(tmp: Path, r) -> str | None:
        return next((why for c in checks if (why := c(tmp, r))), None)
    return after


def case(id: str, item: str, argv: list[str], **kw) -> Case:
    return Case(id, item, argv, env=dict(ENV, **kw.pop("env", {})), **kw)


def with_id(c: Case) -> Case:
    """`{id}` in its argv becomes the bundle's id (known only after setup)."""
    setup = c.setup

    def s(tmp: Path) -> None:
        setup(tmp)  # type: ignore[misc]
        c.argv[:] = [a.replace("{id}", expect_id(tmp)) for a in c.argv]
    c.setup = s
    return c


# ---- the installer: covered by the id, checked before it runs ----------------------------------------------------
INSTALLER = [
    with_id(case("installer-verify-noop-wheel-swapped", "installer", ["--target", "{tmp}/site", "--expect-id", "{id}"],
                 rc=1, cli=CHECKED, watch=("site",),
                 setup=world(edit_file("bundle/install_bundle.py", "    size = path.stat().st_size\n",
                                       "    return None\n    size = path.stat().st_size\n"), swap_wheel),
                 after=both(stdout_has("install_bundle.py: FAILED"), installed_with_gate(None)))),
    with_id(case("install-sh-runs-a-command-first", "installer", ["--target", "{tmp}/site", "--expect-id", "{id}"],
                 rc=1, cli=CHECKED, watch=("site", PWNED),
                 setup=world(edit_file("bundle/install.sh", "set -euo pipefail\n",
                                       "set -euo pipefail\ntouch {tmp}/pwned\n")),
                 after=stdout_has("install.sh: FAILED"))),
    with_id(case("installer-planted-stdlib-module", "installer", ["--target", "{tmp}/site", "--expect-id", "{id}"],
                 rc=0, cli=CHECKED, watch=(PWNED,),
                 setup=world(lambda tmp: (tmp / "bundle/argparse.py").write_text(
                     f"open({str(tmp / PWNED)!r}, 'w').write('planted code ran')\nraise SystemExit(0)\n")),
                 after=installed_with_gate(b"10, 12"))),
    # where the user stands (the case runs in {tmp}): `python -c` / `python -m pip` would import it before the stdlib
    with_id(case("installer-planted-module-in-cwd", "installer", ["--target", "{tmp}/site", "--expect-id", "{id}"],
                 rc=0, cli=CHECKED, watch=(PWNED,),
                 setup=world(lambda tmp: (tmp / "json.py").write_text(
                     f"open({str(tmp / PWNED)!r}, 'w').write('planted code ran')\nraise SystemExit(0)\n")),
                 after=installed_with_gate(b"10, 12"))),
    case("installer-not-the-manifests", "installer", ["--target", "{tmp}/site"], rc=4, cli=INSTALL_SH,
         watch=("site", "bundle"), setup=world(lambda tmp: (tmp / "bundle/install_bundle.py").write_text(
             (tmp / "bundle/install_bundle.py").read_text() + "# edited\n")),
         names=("{tmp}/bundle/install_bundle.py", "manifest")),
]


# ---- --stage / --target: no write through a planted link ---------------------------------------------------------
STAGE = ["--stage", "{tmp}/stage", "--stage-only"]
LINKS = [
    case("stage-planted-manifest-tmp-link", "links", STAGE, cli=INSTALL_SH, watch=(OUTSIDE, "bundle"),
         setup=world(symlink("stage/{id}/.manifest.json.tmp", OUTSIDE)),
         names=("{tmp}/stage/", ".manifest.json.tmp", "symbolic link")),
    case("stage-planted-wheels-dir-link", "links", STAGE, cli=INSTALL_SH, watch=(OUTSIDE_DIR, "bundle"),
         setup=world(symlink("stage/{id}/wheels", OUTSIDE_DIR)), names=("{tmp}/stage/", "wheels", "symbolic link")),
    case("stage-id-dir-is-a-link", "links", STAGE, cli=INSTALL_SH, watch=(OUTSIDE_DIR, "bundle"),
         setup=world(symlink("stage/{id}", OUTSIDE_DIR)), names=("{tmp}/stage/", "symbolic link")),
    case("stage-planted-installer-link", "links", STAGE, cli=INSTALL_SH, watch=(OUTSIDE, "bundle"),
         setup=world(symlink("stage/{id}/install.sh", OUTSIDE)), names=("install.sh", "symbolic link")),
    case("target-planted-marker-tmp-link", "links", ["--target", "{tmp}/site"], rc=0, cli=INSTALL_SH,
         watch=(OUTSIDE,), setup=world(symlink("site/.sglang-blackwell-bundle.json.tmp", OUTSIDE)),
         after=installed_with_gate(b"10, 12")),
    case("target-package-dir-is-a-planted-link", "links", ["--target", "{tmp}/site"], cli=INSTALL_SH,
         watch=(OUTSIDE_DIR,), setup=world(symlink("site/sglang", OUTSIDE_DIR)),
         names=("{tmp}/site/sglang", "symbolic link")),
]


def test_the_lab_flow_still_stages_then_installs(tmp_path: Path):
    """benchmark/lab/README.md's two calls, here with one chunk: stage, then install from the stage with the id."""
    world()(tmp_path)
    hostile.assert_clean(case("lab-flow-stage-only", "links", STAGE, rc=0, cli=INSTALL_SH,
                              after=stdout_has("staged in {tmp}/stage/")), tmp_path)
    c = case("lab-flow-install-from-stage", "links", ["--stage", "{tmp}/stage", "--target", "{tmp}/site",
                                                      "--expect-id", expect_id(tmp_path)], rc=0, cli=CHECKED,
             after=installed_with_gate(b"10, 12"))
    hostile.assert_clean(c, tmp_path)


# ---- index: only regular files that are wheels of the build manifest; nothing truncated -------------------------
def built(tmp: Path) -> None:
    w.make(tmp)
    _cli(tmp, "build", "--out", str(tmp / "dist"))
    (tmp / "id_rsa").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nsecret\n")


def index_world(*steps):
    def setup(tmp: Path) -> None:
        built(tmp)
        for s in steps:
            s(tmp)
    return setup


def our_wheel(tmp: Path) -> Path:
    return next((tmp / "dist").glob("sglang-*.whl"))


INDEX = ["index", "{tmp}/idx", "--dist", "{tmp}/dist"]
INDEXES = [
    case("index-symlinked-wheel-to-a-private-key", "index", INDEX, watch=("idx", "dist"),
         setup=index_world(symlink("dist/key-1.0-py3-none-any.whl", "id_rsa")),
         names=("{tmp}/dist/key-1.0-py3-none-any.whl", "symbolic link")),
    case("index-not-a-wheel", "index", INDEX, watch=("idx", "dist"),
         setup=index_world(lambda tmp: (tmp / "dist/fake-1.0-py3-none-any.whl").write_text("not a zip\n")),
         names=("{tmp}/dist/fake-1.0-py3-none-any.whl", "not a wheel")),
    case("index-wheel-not-of-the-build", "index", INDEX, watch=("idx", "dist"),
         setup=index_world(lambda tmp: make_wheel(tmp / "dist/other-1.0-py3-none-any.whl", "other", "1.0",
                                                  {"other/__init__.py": b""})),
         names=("{tmp}/dist/other-1.0-py3-none-any.whl", "build manifest")),
    case("index-wheel-modified-after-build", "index", INDEX, rc=3, watch=("idx", "dist"),
         setup=index_world(lambda tmp: rewrite_member(our_wheel(tmp), "sglang/gate.py", b"EVIL = True\n")),
         names=(w.WHEEL.replace("0.0.1", "0.0.1+sm120.7"), "manifest-9.9.9.json", "sha256")),
]

# the index command with RLIMIT_FSIZE below the wheel's size: every write past it fails with EFBIG (a full disk);
# with SIGXFSZ at its default (Python ignores it) the process is killed right there, mid-copy (as by SIGKILL).
# -B: the limit must not truncate a .pyc written into the source tree
LIMITED = ("import resource, runpy, signal, sys; n = int(sys.argv.pop(1)); "
           "resource.setrlimit(resource.RLIMIT_FSIZE, (n, n)); {sig}"
           "sys.argv[0] = 'sglang-blackwell'; runpy.run_module('sglang_blackwell.cli', run_name='__main__')")


def full_disk_cli(limit: int) -> tuple[str, ...]:
    return (sys.executable, "-B", "-c", LIMITED.format(sig=""), str(limit))  # -B: no truncated .pyc in the tree


def not_published(tmp: Path, r) -> str | None:
    left = sorted(str(p.relative_to(tmp)) for p in (tmp / "idx").rglob("*.whl")) if (tmp / "idx").exists() else []
    return f"under a final name: {left}" if left else None


def test_index_full_disk_leaves_no_truncated_wheel(tmp_path: Path):
    index_world()(tmp_path)
    limit = our_wheel(tmp_path).stat().st_size // 2
    c = case("index-full-disk", "index", INDEX, cli=full_disk_cli(limit), watch=("idx", "dist"),
             names=("{tmp}/idx/files", "File too large"), after=not_published)
    hostile.assert_clean(c, tmp_path)


KILLED = """\
import subprocess, sys
limit, argv = sys.argv[1], sys.argv[2:]
code = {code!r}
r = subprocess.run([sys.executable, "-B", "-c", code, limit, "index", *argv])  # -B: no truncated .pyc in the tree
assert r.returncode == -{sig}, r.returncode
import pathlib
left = sorted(str(p) for p in pathlib.Path(argv[0]).rglob("*.whl"))
print("after the kill, under a final name:", left or "nothing")
sys.exit(subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "index", *argv]).returncode)
"""


def test_index_killed_mid_copy_then_rerun(tmp_path: Path):
    """Killed mid-copy (SIGXFSZ, as deadly as SIGKILL): nothing under the wheel's final name; the next run sweeps
    the dead run's temporary file and publishes the wheel whole."""
    index_world()(tmp_path)
    wheel = our_wheel(tmp_path)
    (tmp_path / "killed.py").write_text(KILLED.format(code=LIMITED.format(
        sig="signal.signal(signal.SIGXFSZ, signal.SIG_DFL); "), sig=int(signal.SIGXFSZ)))

    def published_whole(tmp: Path, r) -> str | None:
        if "after the kill, under a final name: nothing" not in r.stdout:
            return f"a killed run left a wheel under its final name: {r.stdout[-400:]}"
        got = tmp / "idx/files" / wheel.name
        return None if got.read_bytes() == wheel.read_bytes() else f"{got} is not the built wheel"
    c = case("index-killed-mid-copy", "index", ["{tmp}/idx", "--dist", "{tmp}/dist"], rc=0,
             cli=(sys.executable, "{tmp}/killed.py", str(wheel.stat().st_size // 2)), after=published_whole)
    hostile.assert_clean(c, tmp_path)


def test_index_of_the_build_still_publishes(tmp_path: Path):
    index_world()(tmp_path)
    wheel = our_wheel(tmp_path)

    def ok(tmp: Path, r) -> str | None:
        page = (tmp / "idx/simple/sglang/index.html").read_text()
        return None if wheel.name in page and (tmp / "idx/files" / wheel.name).read_bytes() == wheel.read_bytes() \
            else f"not published: {page}"
    hostile.assert_clean(case("index-of-the-build", "index", INDEX, rc=0, watch=("dist",), after=ok), tmp_path)


CASES = INSTALLER + LINKS + INDEXES


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_hostile(c: Case, tmp_path: Path):
    hostile.assert_clean(c, tmp_path)


def test_case_ids_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
