"""`bench allreduce` argument validation and environment rules, through the real CLI entry point where the
user would meet them. No GPU is involved: every case here must fail before any process is spawned."""

from __future__ import annotations

import argparse

import pytest

from sglang_blackwell import cli
from sglang_blackwell.bench.allreduce import harness as ar
from sglang_blackwell.bench.allreduce.nccl_env import isolated_env, profile_env
from sglang_blackwell.box import nccl
from sglang_blackwell.box.allreduce_catalog import CATALOG, default_backends
from sglang_blackwell.errors import UserError

SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


@pytest.fixture
def safe_env(monkeypatch):
    for k, v in SAFE.items():
        monkeypatch.setenv(k, v)


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["bench", "allreduce", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.mark.parametrize("bad", ["1,x", "0", "-3", "1,,2", "", "2.5"])
def test_bad_tokens(capsys, safe_env, bad):
    rc, _, err = run_cli(capsys, "--tokens", bad)
    assert rc == 2
    assert "--tokens:" in err and "not a positive integer" in err


def test_tokens_sorted_and_deduplicated():
    assert ar.parse_tokens("8, 3,1,3") == [1, 3, 8]


def test_unknown_backend_lists_known(capsys, safe_env):
    rc, _, err = run_cli(capsys, "--backends", "nccl,nvls_magic")
    assert rc == 2
    assert "'nvls_magic'" in err
    for name in CATALOG:
        assert name in err


def test_backend_selection_in_catalog_order():
    assert ar.parse_backends("fi_fused_oneshot,nccl", False) == ["nccl", "fi_fused_oneshot"]
    assert "symm_multimem" not in ar.parse_backends("all", False)
    assert "symm_multimem" in ar.parse_backends("all", True)
    assert ar.parse_backends("all", False) == default_backends(False)


def test_multicast_backend_needs_flag(capsys, safe_env):
    rc, _, err = run_cli(capsys, "--backends", "symm_multimem")
    assert rc == 2 and "--allow-multicast" in err


@pytest.mark.parametrize("missing", list(SAFE))
def test_multicast_env_refused_naming_the_variable(capsys, monkeypatch, safe_env, missing):
    monkeypatch.delenv(missing)
    rc, _, err = run_cli(capsys, "--tp", "2")
    assert rc == 2
    assert f"{missing}={SAFE[missing]} is required (it is None)" in err
    for other in set(SAFE) - {missing}:
        assert f"{other}={SAFE[other]} is required" not in err


def test_multicast_env_wrong_value(capsys, monkeypatch, safe_env):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    rc, _, err = run_cli(capsys)
    assert rc == 2 and "NCCL_NVLS_ENABLE=0 is required (it is '1')" in err


def test_allow_multicast_lifts_env_rule():
    ar.check_env({}, allow_multicast=True)
    with pytest.raises(UserError):
        ar.check_env({}, allow_multicast=False)


def test_unknown_nccl_profile(capsys, safe_env):
    rc, _, err = run_cli(capsys, "--nccl-profile", "none,turbo")
    assert rc == 2 and "'turbo'" in err and "pcie-ll" in err


def test_profile_env_from_the_profiles_file_and_isolation():
    assert profile_env("none") == {}
    assert profile_env("pcie-ll") == nccl.load_profiles()["pcie-ll"].env
    assert profile_env("pcie-ll")["NCCL_PROTO"] == "LL"
    env = isolated_env(profile_env("pcie-ll"), {"NCCL_PROTO": "Simple", "NCCL_NVLS_ENABLE": "0",
                                                 "NCCL_IB_DISABLE": "1", "PATH": "/bin"})
    assert env["NCCL_PROTO"] == "LL" and env["NCCL_NVLS_ENABLE"] == "0" and env["PATH"] == "/bin"
    assert "NCCL_IB_DISABLE" not in env  # ambient NCCL tuning never leaks into a profile run
    assert env["SGLANG_BLACKWELL_NCCL"] == "0"  # our sitecustomize profile switched off
    assert env["NCCL_CONF_FILE"] == "/dev/null"  # and NCCL's config files (ours, the user's ~/.nccl.conf)


@pytest.mark.parametrize("argv,msg", [
    (["--hidden", "7004"], "--hidden must be a multiple of 8"),
    (["--hidden", "0"], "--hidden must be >= 8"),
    (["--layers", "0"], "--layers must be >= 1"),
    (["--reps", "0"], "--reps must be >= 1"),
])
def test_bad_numbers(capsys, safe_env, argv, msg):
    rc, _, err = run_cli(capsys, *argv)
    assert rc == 2 and msg in err


def test_tp_resolution():
    assert ar.resolve_tp(None, 8) == 8
    assert ar.resolve_tp(2, 8) == 2
    with pytest.raises(UserError, match="--tp 4 needs 4 CUDA GPUs; 2 visible"):
        ar.resolve_tp(4, 2)
    with pytest.raises(UserError, match="0 GPU"):
        ar.resolve_tp(None, 0)
    with pytest.raises(UserError, match="--tp must be >= 2"):
        ar.resolve_tp(1, 8)


def test_list_backends(capsys):
    rc, out, _ = run_cli(capsys, "--list-backends")
    assert rc == 0
    assert [ln.split()[0] for ln in out.splitlines()] == list(CATALOG)


def test_parser_defaults():
    p = argparse.ArgumentParser()
    ar.add_arguments(p)
    a = p.parse_args([])
    assert (a.hidden, a.dtype, a.layers, a.tokens) == (7168, "bf16", 61, ar.DEFAULT_TOKENS)
    assert not a.allow_multicast and not a.tune


def test_a_profile_added_to_the_profiles_file_is_measured(tmp_path, monkeypatch, capsys, safe_env):
    """The bench reads nccl_profiles.toml through box/nccl.py: a profile added there is known to it."""
    copy = tmp_path / "nccl_profiles.toml"
    copy.write_text(nccl.PROFILES_FILE.read_text() + """
[profiles.lab-test]
description = "a profile only this test knows"
fits = ["pcie"]
provenance = "test"

[profiles.lab-test.env]
NCCL_MAX_NCHANNELS = "4"
""")
    rc, _, err = run_cli(capsys, "--nccl-profile", "none,lab-test")
    assert rc == 2 and "unknown profile 'lab-test'" in err  # the packaged file does not have it
    monkeypatch.setattr(nccl, "PROFILES_FILE", copy)
    assert ar.parse_profiles("none,lab-test") == {"none": {}, "lab-test": {"NCCL_MAX_NCHANNELS": "4"}}
    env = isolated_env(profile_env("lab-test"), {"NCCL_MAX_NCHANNELS": "32", "NCCL_NVLS_ENABLE": "0"})
    assert env["NCCL_MAX_NCHANNELS"] == "4" and env["SGLANG_BLACKWELL_NCCL"] == "0"


def test_a_profile_run_is_reused_only_when_nccl_would_run_with_the_same_settings(tmp_path):
    """The main run reads the user's ~/.nccl.conf as NCCL does; the `none` profile run reads no config file, so
    it can stand in for the main run only when no file adds anything."""
    from sglang_blackwell.bench.allreduce.nccl_env import nccl_settings

    env = {"HOME": str(tmp_path), "NCCL_NVLS_ENABLE": "0", "PATH": "/bin"}
    none = isolated_env(profile_env("none"), env)
    assert nccl_settings(env) == nccl_settings(none) == {"NCCL_NVLS_ENABLE": "0"}
    (tmp_path / ".nccl.conf").write_text("NCCL_PROTO=Simple\n")
    assert nccl_settings(env) == {"NCCL_NVLS_ENABLE": "0", "NCCL_PROTO": "Simple"}
    assert nccl_settings(none) == {"NCCL_NVLS_ENABLE": "0"}
