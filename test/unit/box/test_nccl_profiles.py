"""NCCL profiles as data: the packaged file, `auto` on simulated topologies (no GPU here: the topologies are
simulated and say so), malformed data, NCCL_CONF_FILE output, and where each variable comes from."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyenvs import PCIE_LL, clean_env, cli

from sglang_blackwell.box import nccl_conf as conf
from sglang_blackwell.box.nccl import (
    DEBUG_KNOBS,
    PROFILES_FILE,
    effective_env,
    load_profiles,
    nccl_conf,
    resolve,
    user_environ,
)
from sglang_blackwell.box.topology import Topology
from sglang_blackwell.errors import UserError


def test_packaged_profiles():
    profiles = load_profiles()
    assert list(profiles) == ["pcie-ll", "none"]
    assert profiles["pcie-ll"].env == PCIE_LL
    assert list(profiles["pcie-ll"].env) == list(PCIE_LL), "file order is kept: it is the order in the block"
    assert profiles["none"].env == {}
    assert set(profiles["pcie-ll"].debug_knobs) == set(DEBUG_KNOBS)
    assert "sitecustomize" in profiles["pcie-ll"].provenance


@pytest.mark.parametrize("topo, want, cls", [
    (Topology.simulated(8, "12.0", kind="SYS"), "pcie-ll", "pcie"),  # the target box: 8x RTX PRO 6000 on PCIe
    (Topology.simulated(8, "12.0", kind="PIX"), "pcie-ll", "pcie"),
    (Topology.simulated(2, "12.0", kind="PXB"), "pcie-ll", "pcie"),
    (Topology.simulated(8, "9.0", kind="NV18", atomics=True), "none", "nvlink"),  # HGX H200
    (Topology.simulated(2, "9.0", kind="NV18"), "none", "nvlink"),
    (Topology.simulated(1, "12.0"), "none", "single"),
    (Topology(), "none", "no-gpu"),
])
def test_auto_follows_topology(topo, want, cls):
    res = resolve("auto", topo, load_profiles())
    assert (res.profile.name, res.topology_class, res.requested) == (want, cls, "auto")


def test_mixed_nvlink_box_is_not_pcie_only():
    t = Topology.simulated(4, "12.0", kind="SYS")
    t.link(0, 1).kind, t.link(2, 3).kind = "NV4", "NV4"  # two bridged pairs, PCIe between them
    assert t.topology_class() == "nvlink"
    assert resolve("auto", t, load_profiles()).profile.name == "none"


def test_explicit_profile_reports_fit():
    profiles = load_profiles()
    assert "does NOT fit" in resolve("pcie-ll", Topology.simulated(2, "9.0", kind="NV18"), profiles).reason
    assert "fits" in resolve("pcie-ll", Topology.simulated(8), profiles).reason
    with pytest.raises(UserError, match="unknown profile.*auto, pcie-ll, none"):
        resolve("fast", Topology(), profiles)


GOOD = PROFILES_FILE.read_text()


@pytest.mark.parametrize("text, match", [
    ("[profiles.x]\ndescription = 1\n", r"profile 'x': missing key 'fits'"),
    (GOOD + '\n[profiles.fast]\ndescription = "d"\nfits = ["pcie"]\nprovenance = "p"\nspeed = 3\n',
     r"profile 'fast': unknown key\(s\) \['speed'\]"),
    (GOOD.replace('NCCL_PROTO = "LL"', "NCCL_PROTO = 1.5"),
     r"profile 'pcie-ll': env key 'NCCL_PROTO'.*must be a string"),
    (GOOD.replace('NCCL_PROTO = "LL"', 'nccl_proto = "LL"'), r"profile 'pcie-ll': env key 'nccl_proto'"),
    (GOOD.replace('NCCL_PROTO = "LL"', 'SGLANG_BLACKWELL_NCCL = "0"'),
     r"env key 'SGLANG_BLACKWELL_NCCL'.*reserved"),
    (GOOD.replace('NCCL_PROTO = "LL"', 'NCCL_PROTO = "L\\nL"'), r"'NCCL_PROTO'.*printable ASCII"),
    (GOOD.replace('fits = ["pcie"]', 'fits = ["pci"]'),
     r"profile 'pcie-ll': key 'fits': unknown topology class"),
    (GOOD.replace('auto_for = ["pcie"]', 'auto_for = ["nvlink"]'),
     r"profile 'pcie-ll': key 'auto_for'.*outside"),
    (GOOD.replace('auto_for = ["pcie"]', "auto_for = []"), r"class 'pcie' must have exactly one"),
    (GOOD.replace("[profiles.none]", "[profiles.auto]").replace("[profiles.none.env]", "[profiles.auto.env]"),
     r"profile 'auto': bad name"),
    (GOOD.replace('description = "no NCCL', 'description = ""\nx_description = "no NCCL'),
     r"unknown key|non-empty"),
    ("[profiles.x\n", r"not valid TOML"),
    ('[other]\na = 1\n', r"unknown top-level key"),
])
def test_malformed_profiles_rejected_with_profile_and_key(tmp_path, text, match):
    f = tmp_path / "profiles.toml"
    f.write_text(text)
    with pytest.raises(UserError, match=match) as e:
        load_profiles(f)
    assert str(f) in str(e.value)


def test_malformed_profiles_via_cli(tmp_path):
    f = tmp_path / "bad.toml"
    f.write_text(GOOD.replace('NCCL_NTHREADS = "512"', "NCCL_NTHREADS = true"))
    r = cli("nccl", "show", "--profiles", str(f), check=False)
    assert r.returncode == 2
    assert "profile 'pcie-ll': env key 'NCCL_NTHREADS'" in r.stderr and str(f) in r.stderr


def parse_nccl_conf(text: str, version: str = "2.23.4") -> dict[str, str]:
    """What NCCL takes from this file alone (2.23: the oldest with NCCL_CONF_FILE, '#' lines not comments)."""
    entries, hazards = conf.parse(text, conf.rules_for(version))
    assert hazards == [], hazards
    return {k: e.value for k, e in conf.ConfFile(Path("x"), "test", entries=entries).values.items()}


@pytest.mark.parametrize("version", ["2.23.4", "2.28.9", "2.30.7"])
def test_nccl_conf_round_trip(version):
    """The profile as NCCL reads it, also where '#' does not start a comment: no comment line holds an '='."""
    p = load_profiles()["pcie-ll"]
    text = nccl_conf(p, "auto")
    assert parse_nccl_conf(text, version) == PCIE_LL
    assert "debugging knobs" in text
    r = cli("nccl", "show", "--profile", "pcie-ll", "--format", "nccl-conf")
    assert parse_nccl_conf(r.stdout, version) == PCIE_LL


def test_show_mentions_debug_knobs_and_provenance():
    r = cli("nccl", "show", "--profile", "pcie-ll")
    assert "NCCL documents NCCL_PROTO and NCCL_ALGO as debugging knobs" in r.stdout
    assert "provenance:" in r.stdout


def test_effective_env_sources(tmp_path):
    conf_file = tmp_path / "nccl.conf"
    conf_file.write_text("NCCL_DEBUG=WARN\nNCCL_PROTO=Simple\n")
    block = {"NCCL_PROTO": "LL", "NCCL_ALGO": "Ring", "NCCL_BUFFSIZE": "16777216"}
    user = {"NCCL_ALGO": "Tree"}
    fresh = {"NCCL_ALGO": "Tree", "NCCL_PROTO": "LL", "SGLANG_BLACKWELL_NCCL_APPLIED": "NCCL_PROTO"}
    files = [conf.read(conf_file, "NCCL_CONF_FILE")]
    rows = {r.key: r for r in effective_env(fresh, user, block_env=block, hook="sitecustomize", files=files)}
    assert (rows["NCCL_ALGO"].value, rows["NCCL_ALGO"].source) == ("Tree", "user")
    assert "the profile would set Ring" in rows["NCCL_ALGO"].note
    assert (rows["NCCL_PROTO"].value, rows["NCCL_PROTO"].source) == ("LL", "sitecustomize")
    assert rows["NCCL_DEBUG"].source == f"file {conf_file}" and rows["NCCL_DEBUG"].note == "line 1"
    assert (rows["NCCL_BUFFSIZE"].value, rows["NCCL_BUFFSIZE"].source) == (None, "default")


def test_user_environ_strips_what_a_block_set():
    env = {"NCCL_PROTO": "LL", "NCCL_DEBUG": "INFO", "SGLANG_BLACKWELL_NCCL_APPLIED": "NCCL_PROTO", "X": "1"}
    assert user_environ(env) == {"NCCL_DEBUG": "INFO", "X": "1"}
    # the kill switch pointed NCCL_CONF_FILE at /dev/null: the user's value comes back (or none, where unset)
    redirected = {"NCCL_CONF_FILE": "/dev/null", "SGLANG_BLACKWELL_NCCL_CONF_FILE_WAS": "/opt/x.conf"}
    assert user_environ(redirected) == {"NCCL_CONF_FILE": "/opt/x.conf"}
    assert user_environ(dict(redirected, SGLANG_BLACKWELL_NCCL_CONF_FILE_WAS="")) == {}
    assert user_environ({"NCCL_CONF_FILE": "/dev/null"}) == {"NCCL_CONF_FILE": "/dev/null"}, "the user's own"


def test_effective_env_names_lines_of_a_managed_conf_block(tmp_path):
    f = tmp_path / "nccl.conf"
    f.write_bytes(b"NCCL_DEBUG=WARN\n# >>> block\nNCCL_PROTO=LL\n# <<<\n")
    cf = conf.read(f, "NCCL_CONF_FILE")
    cf.managed = (f.read_bytes().index(b"# >>>"), len(f.read_bytes()))
    rows = {r.key: r for r in effective_env({}, {}, block_env=None, hook=None, files=[cf])}
    assert rows["NCCL_PROTO"].source == f"nccl-conf {f}" and rows["NCCL_DEBUG"].source == f"file {f}"


def test_show_json_without_block(tmp_path):
    st = json.loads(cli("nccl", "show", "--format", "json", env=clean_env(NCCL_DEBUG="INFO")).stdout)
    assert st["active"] is None
    assert {r["key"]: r["source"] for r in st["env"]}.get("NCCL_DEBUG") == "user"


def test_nccl_help_only_gained_an_option():
    """`nccl --help` keeps every option and choice it had before NCCL-config mode; --nccl-conf is new."""
    text = " ".join(cli("nccl", "--help").stdout.split())
    for kept in ("{show,install,uninstall}", "--profile PROFILE", "--python PATH",
                 "--hook {auto,sitecustomize,pth}", "--format {text,json,nccl-conf}", "--profiles PROFILES"):
        assert kept in text, kept
    assert "--nccl-conf PATH" in text
