"""Hostile input, round 3 class 5 (issue 32): doctor reads each sglang switch it reports (SGLANG_ENABLE_SPLITKV_VERIFY,
SGLANG_ENABLE_BATCH_SIZE_WARMUP, SGLANG_ENABLE_PCIE_IPC_ALLREDUCE) the way the installed sglang does, and says which
value it saw. sglang's own rule (srt/environ.py EnvBool.parse: lowercased, nothing stripped, true/1/yes/y on,
false/0/no/n off, anything else the default) keeps P8 on for `off` and `" 0"` and turns it off for `n`; doctor read
those three the other way.

Each case is the real `doctor` in a fresh process against a stand-in install (dist-info with our marker; with or
without a package directory holding an srt/environ.py of our own making, whose rule differs from sglang's: doctor
must read the installed file, not assume), on a simulated 8-GPU SM120 box, and its receipt's item is checked."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from support import hostile
from support.hostile import Case, assert_clean

P89 = {"base": "0.5.14", "patches": [{"name": "0006-splitkv-verify-mla-on-cuda.patch", "logical_id": "P8"},
                                     {"name": "0007-warmup-first-use-compiles.patch", "logical_id": "P9"}]}
# an environ.py of our own, shaped like sglang's (EnvBool.parse, Envs' defaults) but with another rule: a doctor
# that reads the installed file takes `disable` as off and `no` as not a value; one that assumes takes them the other
# way. Its warm-up switch defaults to off.
OTHER_RULE = '''
class EnvField:
    def __init__(self, default):
        self.default = default


class EnvBool(EnvField):
    def parse(self, value: str) -> bool:
        value = value.strip()
        value = value.casefold()
        if value in ("enable", "1"):
            return True
        if value in ("disable", "0"):
            return False
        raise ValueError(value)


class Envs:
    SGLANG_ENABLE_SPLITKV_VERIFY = EnvBool(True)
    SGLANG_ENABLE_BATCH_SIZE_WARMUP = EnvBool(False)
'''


def _dist(site: Path, name: str, version: str, marker: dict | None = None) -> None:
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    if marker is not None:
        (d / "sglang_blackwell.json").write_text(json.dumps(marker))


def install(version: str = "0.5.14+sm120.4", environ_py: str | None = None, *, pcie_ipc: bool = False
            ) -> Callable[[Path], None]:
    """site/: sglang `version` with P8 and P9 (and a package directory with `environ_py` as srt/environ.py, and
    pcie_ipc_ar.py, where given), flashinfer-python 0.7.2; box.json: 8 simulated SM120 GPUs on PCIe."""
    def setup(tmp: Path) -> None:
        from sglang_blackwell.box.topology import Topology

        site = tmp / "site"
        _dist(site, "sglang", version, P89)
        _dist(site, "flashinfer-python", "0.7.2")
        if environ_py is not None or pcie_ipc:
            srt = site / "sglang" / "srt"
            (srt / "distributed" / "device_communicators").mkdir(parents=True)
            (site / "sglang" / "__init__.py").write_text("raise ImportError('doctor must not import sglang')\n")
            if environ_py is not None:
                (srt / "environ.py").write_text(environ_py)
            if pcie_ipc:
                (srt / "distributed" / "device_communicators" / "pcie_ipc_ar.py").write_text("")
        (tmp / "box.json").write_text(json.dumps(Topology.simulated(8, "12.0", kind="SYS", atomics=False).to_dict()))
    return setup


def item_says(name: str, status: str, *needles: str) -> Callable[[Path, subprocess.CompletedProcess], str | None]:
    def after(tmp: Path, r: subprocess.CompletedProcess) -> str | None:
        checks = {c["id"]: c for c in json.loads((tmp / "d.json").read_text())["checks"]}
        got = checks[name]
        missing = [n for n in needles if n not in got["detail"]]
        if got["status"] != status or missing:
            return f"{name}: {got['status']} ({got['detail']}), expected {status} saying {missing}"
        return None
    return after


ENV = {"PYTHONPATH": "{tmp}/site" + os.pathsep + str(hostile.REPO / "python"),
       "SGLANG_BLACKWELL_TOPOLOGY": "{tmp}/box.json"}


def doctor(id: str, env: dict[str, str], after, setup: Callable[[Path], None] | None = None) -> Case:
    return Case(id, "32.5", ["doctor", "--out", "{tmp}/d.json"], rc=1, setup=setup or install(), env={**ENV, **env},
                after=after)


SPLIT, WARM = "SGLANG_ENABLE_SPLITKV_VERIFY", "SGLANG_ENABLE_BATCH_SIZE_WARMUP"
PCIE = "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"

CASES = [
    # no package directory to read: the 0.5.14 line's recorded rule (base.toml [serving]), which is sglang's
    doctor("splitkv-off-is-not-a-value", {SPLIT: "off"},
           item_says("spec_verify", "warn", "(P8) on", f"{SPLIT}='off', not a value sglang reads")),
    doctor("splitkv-space-0-is-not-a-value", {SPLIT: " 0"},
           item_says("spec_verify", "warn", "(P8) on", f"{SPLIT}=' 0', not a value sglang reads")),
    doctor("splitkv-n-turns-it-off", {SPLIT: "n"}, item_says("spec_verify", "info", f"turned off by {SPLIT}='n'")),
    doctor("warmup-upper-N-turns-it-off", {WARM: "N"}, item_says("spec_verify", "info", f"turned off by {WARM}='N'")),
    # the installed environ.py's own rule and defaults
    doctor("installed-rule-disable-is-off", {SPLIT: "disable"},
           item_says("spec_verify", "info", f"turned off by {SPLIT}='disable'"), install(environ_py=OTHER_RULE)),
    doctor("installed-rule-no-is-not-a-value", {SPLIT: "no"},
           item_says("spec_verify", "warn", "(P8) on", f"{SPLIT}='no', not a value sglang reads"),
           install(environ_py=OTHER_RULE)),
    doctor("installed-default-warmup-off", {}, item_says("spec_verify", "info", f"{WARM} unset (default off)"),
           install(environ_py=OTHER_RULE)),
    # PCIe-IPC (the 0.5.23 line): `on` is not a value sglang reads (it stays off), `y` turns it on
    doctor("pcie-ipc-on-is-not-a-value", {PCIE: "on"},
           item_says("pcie_ipc", "warn", f"{PCIE}='on', not a value sglang reads"),
           install("0.5.23+sm120.1", pcie_ipc=True)),
    doctor("pcie-ipc-y-turns-it-on", {PCIE: "y"}, item_says("pcie_ipc", "ok", f"on ({PCIE}='y' (on))"),
           install("0.5.23+sm120.1", pcie_ipc=True)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_doctor_reads_each_switch_as_sglang_does(tmp_path, case):
    assert_clean(case, tmp_path)
