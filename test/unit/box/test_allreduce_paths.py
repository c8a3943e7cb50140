"""The all-reduce plan: which backend SGLang takes per message size, for simulated boxes (no GPU here; the
facts are simulated), and the facts read from real upstream sglang files (fetched, pinned, verified)."""

from __future__ import annotations

import zipfile

import pytest

from sglang_blackwell.box.allreduce_paths import Facts, MiB, module_constants, plan, sglang_facts

SYMM_TABLE = {9: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB},
              10: {2: 64 * MiB, 4: 64 * MiB, 6: 128 * MiB, 8: 128 * MiB}}
VERIFY = 43008  # EAGLE-3 verify all-reduce on the target model: 3 tokens x 7168 x bf16


def path_at(p, nbytes):
    return next(r for r in p["by_size"] if r["bytes"] == nbytes)


def backend(p, id):
    return next(b for b in p["backends"] if b["id"] == id)


def test_target_box_unpatched_everything_is_nccl():
    """8x RTX PRO 6000 on PCIe with stock sglang 0.5.9 + flashinfer 0.6.4: what users saw."""
    f = Facts(tp=8, capability="12.0", all_p2p=True, all_native_atomics=False, multicast=False,
              sglang="0.5.9", flashinfer="0.6.4", trtllm_comm_accepts=False, symm_mem_max=SYMM_TABLE)
    p = plan(f)
    assert {r["path"] for r in p["by_size"]} == {"nccl"}
    assert "more than two PCIe-only GPUs" in backend(p, "custom_ar")["why"]
    assert "no entry for capability 12" in backend(p, "torch_symm_mem")["why"]
    assert p["fusion"]["usable"] is False and "rejects capability 12.0" in p["fusion"]["why"]
    assert not path_at(p, VERIFY)["fused_in_layers"]


def test_patched_target_box_offers_opt_ins_but_never_auto_fuses():
    f = Facts(tp=8, capability="12.0", all_p2p=True, all_native_atomics=True, multicast=False,
              sglang="0.5.9", sglang_patches=("P2", "P6"), flashinfer="0.6.4", trtllm_comm_accepts=True,
              symm_mem_max=SYMM_TABLE)
    p = plan(f)
    assert path_at(p, VERIFY)["path"] == "nccl"
    assert "torch_symm_mem" in path_at(p, VERIFY)["opt_in_candidates"]
    assert p["fusion"]["mode"] == "opt-in" and p["fusion"]["usable"] is True
    assert not path_at(p, VERIFY)["fused_in_layers"], "SM12x fusion is opt-in only"


def test_symm_mem_without_atomics_stays_off_even_patched():
    f = Facts(tp=8, capability="12.0", all_p2p=True, all_native_atomics=False, multicast=False,
              sglang_patches=("P6",), symm_mem_max=SYMM_TABLE)
    b = backend(plan(f), "torch_symm_mem")
    assert b["usable"] is False and "native P2P atomics" in b["why"]


def test_nvlink_tp2_hopper_lab():
    """The GPU lab: 2x H200, NVLink, multicast off, sglang 0.5.14 + flashinfer 0.6.12."""
    f = Facts(tp=2, capability="9.0", all_nvlink=True, all_p2p=True, all_native_atomics=True, multicast=False,
              sglang="0.5.14", flashinfer="0.6.12", trtllm_comm_accepts=True, symm_mem_max=SYMM_TABLE)
    p = plan(f)
    assert path_at(p, VERIFY)["path"] == "custom_ar" and path_at(p, VERIFY)["fused_in_layers"]
    assert path_at(p, 8 * MiB)["path"] == "custom_ar"
    assert path_at(p, 64 * MiB)["path"] == "nccl"
    assert backend(p, "torch_symm_mem")["usable"] is False  # multicast off, no P6


def test_pcie_ipc_when_enabled():
    base = dict(tp=8, capability="12.0", all_p2p=True, multicast=False, sglang="0.5.23", has_pcie_ipc=True)
    off = plan(Facts(flashinfer="0.7.2", **base))
    assert path_at(off, VERIFY)["path"] == "nccl" and "unset (default off)" in backend(off, "pcie_ipc")["why"]
    on = plan(Facts(flashinfer="0.7.2", env={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, **base))
    assert path_at(on, VERIFY)["path"] == "pcie_ipc"
    old_fi = plan(Facts(flashinfer="0.6.12", env={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, **base))
    assert "flashinfer >= 0.7.0" in backend(old_fi, "pcie_ipc")["why"]


def test_module_constants_reads_expressions(tmp_path):
    f = tmp_path / "m.py"
    f.write_text("MiB = 1024 * 1024\nT = {9: {2: 64 * MiB}, 12: {8: 1 << 20}}\n"
                 "class C:\n    _MAX = 8192 * 1024\n    other = foo()\n")
    assert module_constants(f, {"T", "_MAX", "other"}) == {"T": {9: {2: 64 * MiB}, 12: {8: 1 << 20}},
                                                            "_MAX": 8 * MiB}


@pytest.mark.network
def test_sglang_facts_from_the_pinned_upstream_wheel(tmp_path):
    """Read the real sglang 0.5.9 files (the 0.5.9 line's pinned wheel, fetched and sha256-verified)."""
    from sglang_blackwell.patchset.bases import get_base
    from sglang_blackwell.patchset.fetch import fetch

    art = get_base("0.5.9").package("sglang").files[0]
    try:
        whl = fetch(art)
    except Exception as e:  # no network in this run
        pytest.skip(f"cannot fetch {art.filename}: {e}")
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if name.startswith("sglang/srt/") and name.endswith((
                    "device_communicators/custom_all_reduce.py", "device_communicators/all_reduce_utils.py",
                    "layers/communicator.py", "srt/server_args.py")):
                z.extract(name, tmp_path)
    facts = sglang_facts(tmp_path / "sglang")
    assert facts["custom_ar_max"] == 8192 * 1024
    assert set(facts["symm_mem_max"]) == {9, 10} and facts["symm_mem_max"][9][8] == 128 * MiB
    assert facts["fusion_max_tokens"] == 2048
    assert facts["fusion_flag"] == "--enable-flashinfer-allreduce-fusion"
    assert facts["has_pcie_ipc"] is False


def _extract(base: str, package: str, suffix: str, dest) -> None:
    """One file of a base's pinned upstream wheel (fetched, sha256-verified, cached)."""
    from sglang_blackwell.patchset.bases import get_base
    from sglang_blackwell.patchset.fetch import fetch

    art = get_base(base).package(package).files_for(None)[0]
    try:
        whl = fetch(art)
    except Exception as e:  # no network in this run
        pytest.skip(f"cannot fetch {art.filename}: {e}")
    with zipfile.ZipFile(whl) as z:
        names = [n for n in z.namelist() if n.endswith(suffix)]
        assert names, f"{art.filename} has no {suffix}"
        z.extract(names[0], dest)


@pytest.mark.network
def test_pcie_ipc_facts_from_the_real_release_files(tmp_path):
    """sglang 0.5.23 ships the PCIe-IPC backend, flashinfer 0.7.2 its workspace, flashinfer 0.6.12 neither:
    read from the pinned wheels' own files, as doctor reads an installed stack."""
    from sglang_blackwell.box.allreduce_paths import flashinfer_facts

    _extract("0.5.23", "sglang", "device_communicators/pcie_ipc_ar.py", tmp_path / "sg")
    _extract("0.5.23", "flashinfer", "flashinfer/comm/pcie_ipc_ar.py", tmp_path / "fi072")
    _extract("0.5.14", "flashinfer", "flashinfer/comm/allreduce.py", tmp_path / "fi0612")
    assert sglang_facts(tmp_path / "sg" / "sglang")["has_pcie_ipc"] is True
    assert flashinfer_facts(tmp_path / "fi072" / "flashinfer") == {"flashinfer_pcie_ipc": True}
    assert flashinfer_facts(tmp_path / "fi0612" / "flashinfer") == {"flashinfer_pcie_ipc": False}

    box = dict(tp=8, capability="12.0", multicast=False, sglang="0.5.23", has_pcie_ipc=True,
               env={"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"})
    assert path_at(plan(Facts(flashinfer="0.7.2", flashinfer_pcie_ipc=True, all_p2p=True, **box)),
                   VERIFY)["path"] == "pcie_ipc"
    no_ws = plan(Facts(flashinfer="0.7.2", flashinfer_pcie_ipc=False, all_p2p=True, **box))
    assert "PcieIpcAllReduceWorkspace" in backend(no_ws, "pcie_ipc")["why"]
    no_p2p = plan(Facts(flashinfer="0.7.2", flashinfer_pcie_ipc=True, all_p2p=False, **box))
    assert path_at(no_p2p, VERIFY)["path"] == "nccl" and "P2P access" in backend(no_p2p, "pcie_ipc")["why"]
