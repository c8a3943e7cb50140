"""`sglang-blackwell nccl install|show|uninstall` against real environments: venvs made here, a venv made from
Debian's system Python (whose /usr/lib/python3.X/sitecustomize.py shadows the venv's own), fresh interpreters
and multiprocessing spawn children (how SGLang starts its TP workers)."""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from pyenvs import (
    PCIE_LL,
    clean_env,
    cli,
    debian_python,
    fresh_env,
    listing,
    make_venv,
    site_packages,
    spawn_child_env,
)

from sglang_blackwell.box import nccl_conf as conf
from sglang_blackwell.box.nccl_block import BEGIN, END
from sglang_blackwell.box.nccl_target import HOOK_MODULE, PTH_FILE

# a user's own sitecustomize: CRLF line endings, no trailing newline, and code whose effect we can see
USER_SC = b"import os\r\nos.environ.setdefault('USER_SITECUSTOMIZE_RAN', 'yes')\r\n# no newline at end"


@pytest.fixture
def venv(tmp_path) -> Path:
    return make_venv(tmp_path / "venv")


@pytest.fixture
def debian_venv(tmp_path) -> Path:
    py, why = debian_python()
    if py is None:
        pytest.skip(why)
    return make_venv(tmp_path / "dvenv", py)


def test_install_creates_sitecustomize_fresh_interpreter_and_spawn_child_see_profile(venv, tmp_path):
    sp = site_packages(venv)
    assert not (sp / "sitecustomize.py").exists()
    r = cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    assert "via sitecustomize" in r.stdout
    assert (sp / "sitecustomize.py").exists() and not (sp / PTH_FILE).exists()
    assert fresh_env(venv) == PCIE_LL
    inherited = spawn_child_env(venv, tmp_path, "inherit")
    assert inherited["child"] == PCIE_LL and inherited["exitcode"] == 0
    # the parent drops every NCCL_* before spawning: the child still gets them from its own interpreter start
    own = spawn_child_env(venv, tmp_path, "clear")
    assert own["parent"] == {} and own["child"] == PCIE_LL
    cli("nccl", "uninstall", "--python", str(venv))
    assert not (sp / "sitecustomize.py").exists(), "uninstall must remove the file install created"
    assert fresh_env(venv) == {}


def test_user_values_win_and_kill_switch(venv):
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    env = clean_env(NCCL_PROTO="Simple", NCCL_BUFFSIZE="4194304")
    assert fresh_env(venv, env) == dict(PCIE_LL, NCCL_PROTO="Simple", NCCL_BUFFSIZE="4194304")
    for off in ("0", "off", "false"):
        assert fresh_env(venv, clean_env(SGLANG_BLACKWELL_NCCL=off)) == {}
    assert fresh_env(venv, clean_env(SGLANG_BLACKWELL_NCCL="1")) == PCIE_LL
    # show names each value's source
    st = json.loads(cli("nccl", "show", "--python", str(venv), "--format", "json", env=env).stdout)
    src = {r["key"]: (r["value"], r["source"]) for r in st["env"]}
    assert src["NCCL_PROTO"] == ("Simple", "user")
    assert src["NCCL_ALGO"] == ("Ring", "sitecustomize")
    st = json.loads(cli("nccl", "show", "--python", str(venv), "--format", "json",
                        env=clean_env(SGLANG_BLACKWELL_NCCL="0")).stdout)
    assert st["kill_switch"]["engaged"]
    assert {r["key"]: r["source"] for r in st["env"]}["NCCL_PROTO"] == "default"


def test_existing_sitecustomize_kept_reinstall_idempotent_uninstall_byte_exact(venv):
    sc = site_packages(venv) / "sitecustomize.py"
    sc.write_bytes(USER_SC)
    os.chmod(sc, 0o640)
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    once = sc.read_bytes()
    assert once.startswith(USER_SC) and once.count(BEGIN) == 1 and once.count(END) == 1
    out = subprocess.run([str(venv), "-c", "import os; print(os.environ.get('USER_SITECUSTOMIZE_RAN'), "
                          "os.environ.get('NCCL_PROTO'))"], capture_output=True, text=True, env=clean_env())
    assert out.stdout.split() == ["yes", "LL"], out.stderr
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    assert sc.read_bytes() == once, "re-installing the same profile must not change a byte"
    cli("nccl", "install", "--python", str(venv), "--profile", "none")
    swapped = sc.read_bytes()
    assert swapped.startswith(USER_SC) and swapped.count(BEGIN) == 1 and fresh_env(venv) == {}
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    assert sc.read_bytes() == once
    cli("nccl", "uninstall", "--python", str(venv))
    assert sc.read_bytes() == USER_SC
    assert oct(sc.stat().st_mode & 0o777) == oct(0o640), "file mode kept"
    r = cli("nccl", "uninstall", "--python", str(venv))
    assert "nothing to do" in r.stdout and sc.read_bytes() == USER_SC


def test_user_content_added_after_install_survives_uninstall(venv):
    sc = site_packages(venv) / "sitecustomize.py"
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    sc.write_bytes(sc.read_bytes() + b"X = 1\n")
    cli("nccl", "uninstall", "--python", str(venv))
    assert sc.read_bytes() == b"X = 1\n", "a file install created is removed only while it holds nothing else"


def test_debian_system_python_venv_uses_pth_hook(debian_venv, tmp_path):
    sp = site_packages(debian_venv)
    # the premise: the venv's own sitecustomize.py never runs there
    (sp / "sitecustomize.py").write_text("import os; os.environ['VENV_SC_RAN'] = '1'\n")
    code = "import os, sitecustomize; print(os.environ.get('VENV_SC_RAN'), sitecustomize.__file__)"
    probe = subprocess.run([str(debian_venv), "-c", code], capture_output=True, text=True, env=clean_env())
    ran, used = probe.stdout.split()
    assert ran == "None" and used.startswith("/usr/lib/python3"), probe.stdout
    (sp / "sitecustomize.py").unlink()
    before = listing(sp)

    r = cli("nccl", "install", "--python", str(debian_venv), "--profile", "pcie-ll", check=False)
    assert r.returncode == 0, r.stderr
    assert "via pth" in r.stdout and "shadows" in r.stdout
    assert (sp / PTH_FILE).exists() and (sp / f"{HOOK_MODULE}.py").exists()
    assert not (sp / "sitecustomize.py").exists()
    assert fresh_env(debian_venv) == PCIE_LL
    assert spawn_child_env(debian_venv, tmp_path, "clear")["child"] == PCIE_LL
    show = cli("nccl", "show", "--python", str(debian_venv)).stdout
    assert "shadows this environment's own" in show and "pth" in show

    r = cli("nccl", "install", "--python", str(debian_venv), "--hook", "sitecustomize", check=False)
    assert r.returncode == 2 and "would never run" in r.stderr

    cli("nccl", "uninstall", "--python", str(debian_venv))
    assert listing(sp) == before
    assert fresh_env(debian_venv) == {}


def test_block_left_in_shadowed_sitecustomize_is_reported_and_moved(debian_venv):
    """An install forced into a sitecustomize.py that never runs (e.g. copied from another machine) is flagged
    by show, and a normal install moves it to the .pth hook."""
    sp = site_packages(debian_venv)
    venv_dir = debian_venv.parent.parent
    plain = make_venv(venv_dir.parent / "plain")
    cli("nccl", "install", "--python", str(plain), "--profile", "pcie-ll")
    shutil.copy(site_packages(plain) / "sitecustomize.py", sp / "sitecustomize.py")
    r = cli("nccl", "show", "--python", str(debian_venv), "--format", "json", check=False)
    st = json.loads(r.stdout)
    assert st["active"] is None and any("never runs" in p for p in st["problems"]) and r.returncode == 1
    assert fresh_env(debian_venv) == {}
    cli("nccl", "install", "--python", str(debian_venv), "--profile", "pcie-ll")
    assert not (sp / "sitecustomize.py").exists() and fresh_env(debian_venv) == PCIE_LL


def test_concurrent_installs_never_corrupt(venv):
    sc = site_packages(venv) / "sitecustomize.py"
    sc.write_bytes(USER_SC)
    profiles = ["pcie-ll", "none"] * 4
    with ThreadPoolExecutor(len(profiles)) as pool:  # 8 CLI processes at once
        results = list(pool.map(lambda p: cli("nccl", "install", "--python", str(venv), "--profile", p,
                                              check=False), profiles))
    assert [r.returncode for r in results] == [0] * len(profiles), [r.stderr for r in results]
    data = sc.read_bytes()
    assert data.startswith(USER_SC) and data.count(BEGIN) == 1 and data.count(END) == 1
    got = fresh_env(venv)
    assert got in (PCIE_LL, {}), got
    leftovers = [p.name for p in sc.parent.iterdir() if p.name.startswith(".")]
    assert leftovers == [], f"temp files left behind: {leftovers}"
    cli("nccl", "uninstall", "--python", str(venv))
    assert sc.read_bytes() == USER_SC


def _readonly_runner(site: Path):
    """A command prefix under which `site` is read-only for the CLI, or (None, reason)."""
    if os.geteuid() != 0:
        site.chmod(0o555)
        return [], lambda: site.chmod(0o755)
    # root ignores permission bits; a read-only bind mount in a private mount namespace blocks it for real
    if not shutil.which("unshare"):
        return None, "running as root and `unshare` is missing: cannot make a directory read-only for root"
    t = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if t.returncode != 0:
        why = t.stderr.decode().strip()
        return None, f"running as root without mount namespaces ({why}): cannot make a directory read-only"
    return ["unshare", "-m", "sh", "-c",
            'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"', str(site)], None


def test_readonly_site_packages_clear_error_nothing_changed(venv):
    site = site_packages(venv)
    (site / "sitecustomize.py").write_bytes(USER_SC)
    before = listing(site)
    prefix, undo = _readonly_runner(site)
    if prefix is None:
        pytest.skip(undo)
    try:
        cmd = [sys.executable, "-m", "sglang_blackwell.cli", "nccl", "install", "--python", str(venv),
               "--profile", "pcie-ll"]
        r = subprocess.run([*prefix, *cmd], capture_output=True, text=True, env=clean_env())
    finally:
        if callable(undo):
            undo()
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(site) in r.stderr and "nothing was changed" in r.stderr
    assert "read-only" in r.stderr or "ermission" in r.stderr
    assert listing(site) == before


def test_missing_site_packages_clear_error(venv):
    site = site_packages(venv)
    shutil.rmtree(site)
    r = cli("nccl", "install", "--python", str(venv), check=False)
    assert r.returncode == 2 and str(site) in r.stderr and "does not exist" in r.stderr
    assert not site.exists()


def test_bad_interpreter_clear_error(tmp_path):
    r = cli("nccl", "show", "--python", str(tmp_path / "nope" / "python"), check=False)
    assert r.returncode == 2 and "no such interpreter" in r.stderr


def test_damaged_block_refused(venv):
    sc = site_packages(venv) / "sitecustomize.py"
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll")
    damaged = sc.read_bytes().replace(END, b"# edited away")
    sc.write_bytes(damaged)
    r = cli("nccl", "install", "--python", str(venv), check=False)
    assert r.returncode == 2 and "damaged" in r.stderr and str(sc) in r.stderr
    assert sc.read_bytes() == damaged


HEAVY = ("torch", "pynvml", "ctypes", "_ctypes", "numpy", "sglang_blackwell", "cuda", "tomllib", "json")
MODULES = "import sys; print(sorted(sys.modules))"  # imports nothing itself


@pytest.mark.parametrize("env_fixture", ["venv", "debian_venv"])
def test_block_imports_nothing_at_interpreter_start(env_fixture, request):
    """No timing assertion (benchmarks own speed claims): the block imports nothing heavy, nothing at all."""
    py = request.getfixturevalue(env_fixture)

    def modules() -> tuple[set[str], str]:
        out = subprocess.run([str(py), "-X", "importtime", "-c", MODULES], capture_output=True, text=True,
                             env=clean_env(), check=True)
        return set(ast.literal_eval(out.stdout.strip())), out.stderr

    before, _ = modules()
    cli("nccl", "install", "--python", str(py), "--profile", "pcie-ll")
    after, importtime = modules()
    assert fresh_env(py) == PCIE_LL, "the block ran"
    added = after - before
    assert added <= {"sitecustomize", HOOK_MODULE}, added
    assert not any(m.split(".")[0] in HEAVY for m in after), sorted(after)
    assert "torch" not in importtime and "pynvml" not in importtime


def test_pythonpath_sitecustomize_shadow_is_detected_too(venv, tmp_path):
    """Any sitecustomize earlier on sys.path shadows the environment's: here one on PYTHONPATH."""
    shadow = tmp_path / "shadowdir"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text("")
    env = clean_env(PYTHONPATH=str(shadow))
    r = cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", env=env)
    assert "via pth" in r.stdout and str(shadow) in r.stdout
    assert fresh_env(venv, env) == PCIE_LL


# ---- NCCL-config mode: the profile also in an NCCL config file (install --nccl-conf PATH) ---------------------

CONF_USER_FILES = {  # a user's own NCCL config file, as it may be: every byte must survive
    "crlf": b"NCCL_DEBUG=WARN\r\n# mine\r\nNCCL_SOCKET_IFNAME=eth0\r\n",
    "no-trailing-newline": b"NCCL_DEBUG=WARN\nNCCL_IB_DISABLE=1",
    "latin-1": b"# r\xe9glages de l'\xe9quipe\nNCCL_DEBUG=WARN\n",
    "empty": b"",
    "absent": None,
}


def conf_blocks(data: bytes) -> tuple[int, int]:
    return data.count(BEGIN), data.count(END)


@pytest.mark.parametrize("kind", sorted(CONF_USER_FILES))
def test_nccl_conf_install_is_idempotent_and_uninstall_byte_exact(venv, tmp_path, kind):
    f = tmp_path / "etc" / "nccl.conf"
    f.parent.mkdir()
    original = CONF_USER_FILES[kind]
    if original is not None:
        f.write_bytes(original)
        os.chmod(f, 0o640)
    r = cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    assert f"NCCL config file {f}" in r.stdout
    once = f.read_bytes()
    assert once.startswith(original or b"") and conf_blocks(once) == (1, 1)
    # what NCCL takes from the file: the user's lines, then the profile; 2.23 reads '#' lines too, so this also
    # checks that no comment line of ours holds an '='
    old = conf.rules_for("2.23.4")
    users = {e.name: e.value for e in conf.parse(original or b"", old)[0]}
    got = {k: e.value for k, (e, _) in conf.from_files([conf.read(f, "NCCL_CONF_FILE", old)], {}).items()}
    assert got == dict(users, **PCIE_LL)
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    assert f.read_bytes() == once, "re-installing the same profile must not change a byte"
    cli("nccl", "install", "--python", str(venv), "--profile", "none", "--nccl-conf", str(f))
    swapped = f.read_bytes()
    assert swapped.startswith(original or b"") and conf_blocks(swapped) == (1, 1) and b"NCCL_PROTO" not in swapped
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    assert f.read_bytes() == once
    r = cli("nccl", "uninstall", "--python", str(venv))
    if original is None:
        assert not f.exists(), "uninstall removes the file install created"
    else:
        assert f.read_bytes() == original and oct(f.stat().st_mode & 0o777) == oct(0o640)
    assert not (site_packages(venv) / "sitecustomize.py").exists()
    assert "nothing to do" in cli("nccl", "uninstall", "--python", str(venv), "--nccl-conf", str(f)).stdout
    assert [p.name for p in f.parent.iterdir() if p.name.startswith(".")] == []


def test_user_lines_after_the_conf_block_survive_uninstall(venv, tmp_path):
    f = tmp_path / "nccl.conf"
    f.write_bytes(b"NCCL_DEBUG=WARN\n")
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    f.write_bytes(f.read_bytes() + b"NCCL_PROTO=Simple\n")  # after the block: NCCL keeps the block's LL
    assert conf.read(f, "x").values["NCCL_PROTO"].value == "LL"
    cli("nccl", "uninstall", "--python", str(venv), "--nccl-conf", str(f))
    assert f.read_bytes() == b"NCCL_DEBUG=WARN\nNCCL_PROTO=Simple\n"


def test_user_lines_above_the_block_win_and_install_says_so(venv, tmp_path):
    f = tmp_path / "nccl.conf"
    f.write_bytes(b"NCCL_PROTO=Simple\n")
    r = cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    assert f"{f} line 1, above the block, sets NCCL_PROTO='Simple': NCCL keeps that one" in r.stdout
    assert "NCCL_PROTO=Simple  (line 1)" in r.stdout


def test_nccl_conf_file_decides_for_every_python_process_and_the_kill_switch_reaches_nccl(venv, tmp_path):
    f = tmp_path / "nccl.conf"
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    ours = {"NCCL_CONF_FILE": str(f)}
    assert fresh_env(venv, clean_env(**ours)) == dict(PCIE_LL, **ours)
    assert fresh_env(venv) == PCIE_LL, "NCCL_CONF_FILE unset: Python processes still get the profile"
    # another file named (e.g. /dev/null): NCCL reads that one, so the startup block applies nothing either
    assert fresh_env(venv, clean_env(NCCL_CONF_FILE="/dev/null")) == {"NCCL_CONF_FILE": "/dev/null"}
    other = tmp_path / "mine.conf"
    assert fresh_env(venv, clean_env(NCCL_CONF_FILE=str(other))) == {"NCCL_CONF_FILE": str(other)}
    # via a symlink or a relative path it is still our file
    link = tmp_path / "link.conf"
    link.symlink_to(f)
    assert fresh_env(venv, clean_env(NCCL_CONF_FILE=str(link))) == dict(PCIE_LL, NCCL_CONF_FILE=str(link))
    # the kill switch: nothing set, and NCCL_CONF_FILE pointed away from our file (NCCL in this process and
    # its children skip it)
    assert fresh_env(venv, clean_env(SGLANG_BLACKWELL_NCCL="0", **ours)) == {"NCCL_CONF_FILE": "/dev/null"}
    spawned = spawn_child_env_with(venv, tmp_path, clean_env(SGLANG_BLACKWELL_NCCL="off", **ours))
    assert spawned["child"] == {"NCCL_CONF_FILE": "/dev/null"}
    # show reads it back: the user's NCCL_CONF_FILE, the switch, and where each variable comes from
    st = json.loads(cli("nccl", "show", "--python", str(venv), "--format", "json",
                        env=clean_env(SGLANG_BLACKWELL_NCCL="0", **ours)).stdout)
    assert st["kill_switch"]["engaged"] and st["problems"] == []
    (blk,) = st["nccl_conf"]["blocks"]
    assert blk["path"] == str(f) and not blk["active"] and "pointed NCCL_CONF_FILE at /dev/null" in blk["why_inactive"]
    st = json.loads(cli("nccl", "show", "--python", str(venv), "--format", "json",
                        env=clean_env(NCCL_CONF_FILE="/dev/null")).stdout)
    assert "names another file" in st["nccl_conf"]["off"] and st["problems"] == []
    r = cli("nccl", "show", "--python", str(venv), "--format", "json", check=False)
    st = json.loads(r.stdout)
    assert any("NCCL_CONF_FILE is not set here" in p for p in st["problems"]), st["problems"]
    assert r.returncode == 1, "a problem reported is exit 1, in JSON as in text"
    st = json.loads(cli("nccl", "show", "--python", str(venv), "--format", "json", env=clean_env(**ours)).stdout)
    assert st["problems"] == [] and st["active"]["nccl_conf"] == str(f)
    assert [x["role"] for x in st["nccl_conf"]["files"]] == ["NCCL_CONF_FILE", "/etc/nccl.conf"]
    assert st["nccl_conf"]["files"][0]["managed_block"] and st["nccl_conf"]["blocks"][0]["active"]


def test_show_exits_1_when_it_prints_a_problem_and_lists_the_files_in_nccls_order(venv, tmp_path):
    """Issue 24 item 6: a PROBLEM line is exit 1 (bad input stays 2, a clean state 0); the config files are listed
    in the order NCCL reads them, the one NCCL_CONF_FILE replaces (~/.nccl.conf) named as not read."""
    f = tmp_path / "nccl.conf"
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    r = cli("nccl", "show", "--python", str(venv), check=False)
    problems = [ln for ln in r.stdout.splitlines() if ln.startswith("PROBLEM: ")]
    assert r.returncode == 1 and problems and f"NCCL config block in {f} is not read here" in problems[0], r.stdout
    files = [ln for ln in r.stdout.split("NCCL config files, in the order ")[1].split("\n\n")[0].splitlines()[1:]
             if not ln.startswith("  block in ")]
    assert files[0] == "  NCCL_CONF_FILE: not set" and files[-1] == "  /etc/nccl.conf: absent", files
    r = cli("nccl", "show", "--python", str(venv), env=clean_env(NCCL_CONF_FILE=str(f)))
    assert r.returncode == 0 and "PROBLEM" not in r.stdout
    files = r.stdout.split("NCCL config files, in the order ")[1].split("\n\n")[0].splitlines()[1:]
    assert files == [f"  NCCL_CONF_FILE: {f}: 6 variable(s) (holds the sglang-blackwell block)",
                     "  ~/.nccl.conf: not read (NCCL_CONF_FILE is set: NCCL reads that file instead)",
                     "  /etc/nccl.conf: absent"], files
    bad = cli("nccl", "show", "--python", str(tmp_path / "nope" / "python"), check=False)
    assert bad.returncode == 2 and "--python" in bad.stderr
    # NCCL_CONF_FILE unset: NCCL reads ~/.nccl.conf (from 2.30 the $HOME of the process), so show lists it, read
    home = tmp_path / "home"
    home.mkdir()
    (home / ".nccl.conf").write_text("NCCL_PROTO=Simple\n")
    env = clean_env(HOME=str(home))
    st = json.loads(cli("nccl", "show", "--python", str(venv), "--format", "json", env=env, check=False).stdout)
    mine = {Path(x["path"]) for x in st["nccl_conf"]["files"] if x["role"] == "~/.nccl.conf"}
    want = conf.home_dir(env, conf.rules_for(st["nccl_conf"]["rules"]["version"]))
    assert mine == {Path(f"{want}/.nccl.conf")}, st["nccl_conf"]["files"]
    text = cli("nccl", "show", "--python", str(venv), env=env, check=False).stdout
    if want == str(home):  # NCCL >= 2.30 (or none found: the newest rules), as in the test environment
        assert f"  ~/.nccl.conf: {home}/.nccl.conf: 1 variable(s)" in text.splitlines(), text


SPAWN_ENV = r'''
import json, multiprocessing as mp, os
def child(q):
    q.put({k: v for k, v in os.environ.items() if k.startswith("NCCL_")})
if __name__ == "__main__":
    mp.set_start_method("spawn", force=True)
    q = mp.Queue()
    p = mp.Process(target=child, args=(q,))
    p.start()
    print(json.dumps({"child": q.get(timeout=60)}))
    p.join(60)
'''


def spawn_child_env_with(python: Path, tmp: Path, env: dict[str, str]) -> dict:
    script = tmp / "spawn_env.py"
    script.write_text(SPAWN_ENV)
    out = subprocess.run([str(python), str(script)], capture_output=True, text=True, check=True, env=env,
                         timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.network
def test_real_nccl_reads_the_profile_from_the_file_and_the_switches_hold(venv, tmp_path):
    """libnccl.so.2 itself (ncclGetUniqueId reads the config files; no GPU needed): in a process our startup
    block never ran in (python -S, as any non-Python program), and in the environment's own interpreters."""
    from support.real_nccl import nccl_env, nccl_home

    home, why = nccl_home("2.28.9")
    if home is None:
        pytest.skip(why)
    f = tmp_path / "nccl.conf"
    f.write_bytes(b"NCCL_DEBUG=WARN\r\n")  # a user's CRLF line above the block: ours still read cleanly
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(f))
    base = clean_env(HOME=str(tmp_path))
    no_block = nccl_env(home, dict(base, NCCL_CONF_FILE=str(f)), python=str(venv))
    assert no_block["set"] == dict(PCIE_LL, NCCL_DEBUG="WARN\r"), "NCCL 2.28 keeps the CR of a CRLF line"
    assert nccl_env(home, dict(base, NCCL_CONF_FILE=str(f), NCCL_PROTO="Simple"), python=str(venv))["set"] == \
        dict({k: v for k, v in PCIE_LL.items() if k != "NCCL_PROTO"}, NCCL_DEBUG="WARN\r"), "the environment wins"
    assert nccl_env(home, dict(base, NCCL_CONF_FILE="/dev/null"), python=str(venv))["set"] == {}
    # the environment's own interpreter: the startup block set the profile already (the environment wins over
    # the file), and with the kill switch NCCL reads nothing of ours
    started = nccl_env(home, dict(base, NCCL_CONF_FILE=str(f)), python=str(venv), site=True)
    assert started["set"] == {"NCCL_DEBUG": "WARN\r"}
    off = nccl_env(home, dict(base, NCCL_CONF_FILE=str(f), SGLANG_BLACKWELL_NCCL="0"), python=str(venv), site=True)
    assert off["set"] == {}


@pytest.mark.parametrize("where, message", [
    ("/etc/nccl.conf", "could not be switched off"),
    ("{tmp}/no/such/dir/nccl.conf", "does not exist; nothing was changed"),
    ("{tmp}", "is a directory"),
])
def test_bad_nccl_conf_paths_are_refused_and_nothing_is_written(venv, tmp_path, where, message):
    before = listing(site_packages(venv))
    r = cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf",
            where.format(tmp=tmp_path), check=False)
    assert r.returncode == 2 and message in r.stderr and "--nccl-conf" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert listing(site_packages(venv)) == before


def test_later_installs_keep_the_conf_file_and_a_new_path_moves_it(venv, tmp_path):
    a, b = tmp_path / "a.conf", tmp_path / "b.conf"
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(a))
    r = cli("nccl", "install", "--python", str(venv), "--profile", "none")
    assert "kept from the earlier install" in r.stdout
    assert b"NCCL_PROTO" not in a.read_bytes() and b'"profile": "none"' in a.read_bytes()
    cli("nccl", "install", "--python", str(venv), "--profile", "pcie-ll", "--nccl-conf", str(b))
    assert not a.exists() and b"NCCL_PROTO=LL" in b.read_bytes()
    assert fresh_env(venv, clean_env(NCCL_CONF_FILE=str(a))) == {"NCCL_CONF_FILE": str(a)}
    assert fresh_env(venv, clean_env(NCCL_CONF_FILE=str(b))) == dict(PCIE_LL, NCCL_CONF_FILE=str(b))
    cli("nccl", "uninstall", "--python", str(venv))
    assert not b.exists() and not (site_packages(venv) / "sitecustomize.py").exists()


def test_concurrent_installs_into_one_conf_file_never_corrupt(venv, tmp_path):
    f = tmp_path / "nccl.conf"
    f.write_bytes(b"NCCL_DEBUG=WARN")
    profiles = ["pcie-ll", "none"] * 3
    with ThreadPoolExecutor(len(profiles)) as pool:
        results = list(pool.map(lambda p: cli("nccl", "install", "--python", str(venv), "--profile", p,
                                              "--nccl-conf", str(f), check=False), profiles))
    assert [r.returncode for r in results] == [0] * len(profiles), [r.stderr for r in results]
    data = f.read_bytes()
    assert data.startswith(b"NCCL_DEBUG=WARN\n") and conf_blocks(data) == (1, 1)
    cli("nccl", "uninstall", "--python", str(venv))
    assert f.read_bytes() == b"NCCL_DEBUG=WARN"


def test_show_reads_a_users_conf_file_as_nccl_does(venv, tmp_path):
    f = tmp_path / "mine.conf"
    f.write_bytes(b"NCCL_PROTO = Simple\nNCCL_ALGO=Tree\nNCCL_ALGO=Ring\nNCCL_DEBUG=WARN\r\n")
    env = clean_env(NCCL_CONF_FILE=str(f))
    st = json.loads(cli("nccl", "show", "--python", str(venv), "--format", "json", env=env).stdout)
    rows = {r["key"]: (r["value"], r["source"], r["note"]) for r in st["env"]}
    assert rows["NCCL_ALGO"] == ("Tree", f"file {f}", "line 2"), "the first line for a name wins"
    assert "NCCL_PROTO" not in rows, "'NCCL_PROTO ' is another variable: NCCL never reads it"
    hazards = "\n".join(st["nccl_conf"]["hazards"])
    assert f"{f}: line 1: NCCL sets 'NCCL_PROTO ' (spaces included)" in hazards
    assert "line 3: NCCL_ALGO again: NCCL keeps the first one (line 2)" in hazards
    text = cli("nccl", "show", "--python", str(venv), env=env).stdout
    assert f"NCCL_CONF_FILE: {f}: 3 variable(s)" in text and "check: " in text


@pytest.mark.parametrize("env_fixture", ["venv", "debian_venv"])
def test_conf_mode_block_imports_nothing_either(env_fixture, request, tmp_path):
    py = request.getfixturevalue(env_fixture)
    f = tmp_path / "nccl.conf"
    env = clean_env(NCCL_CONF_FILE=str(f))

    def modules() -> set[str]:
        out = subprocess.run([str(py), "-c", MODULES], capture_output=True, text=True, env=env, check=True)
        return set(ast.literal_eval(out.stdout.strip()))

    before = modules()
    cli("nccl", "install", "--python", str(py), "--profile", "pcie-ll", "--nccl-conf", str(f))
    after = modules()
    assert fresh_env(py, env) == dict(PCIE_LL, NCCL_CONF_FILE=str(f)), "the block ran, its NCCL_CONF_FILE test too"
    assert after - before <= {"sitecustomize", HOOK_MODULE}, after - before
