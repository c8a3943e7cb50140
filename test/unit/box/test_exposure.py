"""`sglang-blackwell serve` never exposes a server beyond loopback without a key (issue 31 item 6): a --host that
is not loopback without --api-key is refused in one line (exit 2) saying how to set one, unless the loud opt-out
`--allow-unauthenticated`; the plan says who can reach the server; the printed command masks the keys; every
launch the docs show is keyed where it listens beyond loopback."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_blackwell.box import sglang_argv
from sglang_blackwell.box.exposure import check, is_loopback
from sglang_blackwell.box.serve import plan
from sglang_blackwell.box.topology import Topology
from sglang_blackwell.errors import UserError

REPO = Path(__file__).resolve().parents[3]
BOX = Topology.simulated(2, "12.0", kind="SYS", atomics=False)


def _plan(args: list[str], **kw):
    return plan(args, topology=BOX, table_path=None, profile=None, environ={}, sglang_version="0.5.14", **kw)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NCCL_", "SGLANG_"))}
    return subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "serve", *args], capture_output=True,
                          text=True, env=env, timeout=60)


def test_dry_run_on_any_host_without_a_key_is_refused_in_one_line():
    r = _cli("--dry-run", "--", "--model-path", "m", "--host", "0.0.0.0")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.strip() == (
        "sglang-blackwell serve: error: --host 0.0.0.0: the server would answer anyone who reaches this machine, "
        "with no key: add --api-key <key> and --admin-api-key <another key> after --, or bind --host 127.0.0.1 "
        "(serve --allow-unauthenticated starts it open anyway)")


@pytest.mark.parametrize("args", [
    ["--host", "0.0.0.0"], ["--host=0.0.0.0"], ["--ho", "0.0.0.0"], ["--host", "::"], ["--host", "10.1.2.3"],
    ["--host", "gpu-box.example.org"], ["--host", "127.0.0.1", "--host", "0.0.0.0"],
    ["--host", "0.0.0.0", "--api-key", ""], ["--host", "0.0.0.0", "--admin-api-key", "a"],
])
def test_beyond_loopback_without_an_api_key_is_refused(args):
    with pytest.raises(UserError) as e:
        _plan(["--model-path", "m", *args])
    assert "--api-key <key>" in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("args, said", [
    ([], "--host 127.0.0.1 (sglang's default): loopback"),
    (["--host", "localhost"], "--host localhost: loopback"),
    (["--host", "::1"], "--host ::1: loopback"),
    (["--host", "0.0.0.0", "--host", "127.0.0.1"], "--host 127.0.0.1: loopback"),
    (["--host", "0.0.0.0", "--api-key", "k"], "no --admin-api-key, so the admin endpoints are closed"),
    (["--host", "0.0.0.0", "--ap=k", "--adm", "a"], "--api-key for the API, --admin-api-key for the admin"),
])
def test_loopback_or_keyed_is_planned_and_said(args, said):
    p = _plan(["--model-path", "m", *args])
    assert any(said in w for w in p.why), p.why


def test_the_opt_out_is_loud(tmp_path):
    p = _plan(["--model-path", "m", "--host", "0.0.0.0"], allow_unauthenticated=True)
    (warn,) = [w for w in p.why if w.startswith("WARNING: --allow-unauthenticated")]
    assert "anyone who reaches this machine" in warn and "admin endpoints stay closed" in warn
    r = _cli("--dry-run", "--allow-unauthenticated", "--", "--model-path", "m", "--host", "0.0.0.0")
    assert r.returncode == 0 and "WARNING: --allow-unauthenticated" in r.stderr, r.stderr


def test_a_config_file_host_counts(tmp_path):
    (tmp_path / "s.yaml").write_text("host: 0.0.0.0\n")
    with pytest.raises(UserError) as e:
        _plan(["--model-path", "m", "--config", str(tmp_path / "s.yaml")])
    assert f"--host 0.0.0.0 in {tmp_path / 's.yaml'}" in str(e.value)
    (tmp_path / "k.yaml").write_text("host: 0.0.0.0\napi-key: k\n")
    _plan(["--model-path", "m", "--config", str(tmp_path / "k.yaml")])


def test_the_printed_command_masks_the_keys():
    r = _cli("--dry-run", "--", "--model-path", "m", "--host", "0.0.0.0", "--api-key", "SECRET-1",
             "--admin-api-key=SECRET-2")
    assert r.returncode == 0, r.stderr
    assert "SECRET" not in r.stderr
    command = next(ln for ln in r.stderr.splitlines() if ln.startswith("  command: "))
    assert command.endswith("--api-key '***' '--admin-api-key=***'")
    assert sglang_argv.mask_keys(["--api", "x", "--ad=y", "--host", "h"]) == ["--api", "***", "--ad=***", "--host",
                                                                             "h"]


def test_loopback_means_this_machine_only():
    assert [h for h in ("127.0.0.1", "127.9.9.9", "localhost", "LOCALHOST", "::1", "[::1]") if not is_loopback(h)] == []
    assert [h for h in ("0.0.0.0", "::", "10.0.0.1", "192.168.1.2", "box", "", "[::]") if is_loopback(h)] == []


def _documented_launches() -> list[tuple[str, list[str]]]:
    """Every launch the README and docs/ show in a code block: (where, the sglang arguments)."""
    out = []
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        blocks = re.findall(r"^```[^\n]*\n(.*?)^```", doc.read_text(), re.S | re.M)
        for block in blocks:
            for cmd in block.replace("\\\n", " ").splitlines():
                if not any(k in cmd for k in ("sglang.launch_server", "docker run", "sglang-blackwell serve")):
                    continue
                tokens = shlex.split(cmd, comments=True)
                if "sglang.launch_server" in tokens:
                    args = tokens[tokens.index("sglang.launch_server") + 1:]
                elif tokens[:2] == ["docker", "run"]:
                    image = next((i for i, t in enumerate(tokens) if t.startswith("ghcr.io/")), None)
                    if image is None:
                        continue
                    args = tokens[image + 1:]
                elif tokens[:2] == ["sglang-blackwell", "serve"] and "--" in tokens:
                    args = tokens[tokens.index("--") + 1:]
                else:
                    continue
                out.append((f"{doc.relative_to(REPO)}: {cmd.strip()[:60]}", args))
    return out


def test_every_documented_launch_is_keyed_beyond_loopback():
    launches = _documented_launches()
    assert any("docker run" in where for where, _ in launches)  # the Docker examples are found
    for where, args in launches:
        parsed = sglang_argv.read(args)
        check(parsed, allow_unauthenticated=False)  # raises for an unkeyed host beyond loopback
        if parsed.host is not None and not is_loopback(parsed.host):
            assert parsed.admin_api_key_set, f"{where}: listens beyond loopback without --admin-api-key"


def test_the_healthcheck_polls_the_path_sglang_exempts_from_keys():
    """The image's HEALTHCHECK reaches /health, which sglang's auth lets through without a key on every line (and
    P12 keeps so: test/unit/patches/test_p12_admin_endpoints.py asks a keyed 0.0.0.0 server for it)."""
    df = (REPO / "docker" / "Dockerfile").read_text()
    (url,) = re.findall(r"SGLANG_BLACKWELL_HEALTH_URL=(\S+)", df)
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/health", url)


SGLANG_PARSE = """
import argparse, json, sys
from sglang.srt.server_args import ServerArgs
out = []
for argv in json.loads(sys.argv[1]):
    p = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(p)
    a = p.parse_args(argv)
    out.append([a.host, bool(a.api_key), bool(a.admin_api_key)])
print(json.dumps(out))
"""


def test_host_and_keys_are_the_ones_sglangs_own_parser_reads(sglang_0523_tree):
    """sglang 0.5.23's own argparse (its pinned wheel, on CPU) reads the same host and keys from each line."""
    m = ["--model-path", "m"]
    cases = [m, [*m, "--host", "0.0.0.0"], [*m, "--ho", "::", "--ap", "k"], [*m, "--hos=1.2.3.4", "--ad=a"],
             [*m, "--host", "0.0.0.0", "--host", "localhost"], [*m, "--api-key", "", "--admin-api-key", "x"],
             [*m, "--api-key=k", "--api-key="]]
    env = {**os.environ, "PYTHONPATH": str(sglang_0523_tree), "CUDA_VISIBLE_DEVICES": ""}
    r = subprocess.run([sys.executable, "-c", SGLANG_PARSE, json.dumps(cases)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    theirs = json.loads(r.stdout.strip().splitlines()[-1])
    ours = []
    for argv in cases:
        p = sglang_argv.read(argv)
        ours.append([p.host if p.host is not None else "127.0.0.1", p.api_key_set, p.admin_api_key_set])
    assert ours == theirs
