"""Dispatch-table logic: winners per size, ranges and crossovers, same-operation comparison, exclusion of
backends that failed numerics, ties, validation, persistence, and the knobs the runtime gets.
Measurements are synthetic (the lab reference numbers, see conftest)."""

from __future__ import annotations

import json

import pytest

from sglang_blackwell.box import allreduce_table as tbl
from sglang_blackwell.errors import UserError
from support.allreduce_results import H200_NET_US, H200_TOPOLOGY, build_results

KEY = tbl.TopologyKey("NVIDIA H200", "9.0", 2, "nvlink")
H, E = 7168, 2


def entry_for(results, tie_rel=tbl.DEFAULT_TIE_REL):
    return tbl.build_entry(results, KEY, tie_rel=tie_rel)


def spans(entry, op):
    return [(r["tokens"][0], r["tokens"][1], r["backend"]) for r in entry["ops"][op]["ranges"]]


def test_key_format_and_from_topology():
    assert KEY.key() == "NVIDIA H200|sm90|tp2|nvlink"
    rtx = {"gpu_name": "NVIDIA RTX PRO 6000 Blackwell", "capability": (12, 0), "link": "pcie"}
    k = tbl.facts_key(rtx, 8)
    assert k.key() == "NVIDIA RTX PRO 6000 Blackwell|sm120|tp8|pcie"
    with pytest.raises(UserError, match="gpu_name"):
        tbl.facts_key({"capability": "9.0"}, 2)


def test_reference_measurement_ranges():
    e = entry_for(build_results(H200_NET_US))
    # fused one-shot beats NCCL+norm at every size; AR-only never competes with it
    assert spans(e, "ar_rmsnorm") == [(1, 512, "fi_fused_oneshot")]
    # AR-only: FlashInfer one-shot up to 256; at 512 symm two-shot (30.43) and FI (31.15) tie within 3%
    # and the tie goes to the more conservative symm-mem path
    assert spans(e, "ar") == [(1, 256, "fi_ar_oneshot"), (257, 512, "symm_twoshot")]
    r = e["ops"]["ar"]["ranges"][1]
    assert r["bytes"] == [257 * H * E, 512 * H * E]


def test_same_operation_only():
    e = entry_for(build_results(H200_NET_US))
    assert "fi_ar_oneshot" not in e["ops"]["ar_rmsnorm"]["latency_us"]  # faster, but a different operation
    assert "nccl_norm" not in e["ops"]["ar"]["latency_us"]
    assert set(e["ops"]["ar_rmsnorm"]["latency_us"]) == {"nccl_norm", "fi_fused_oneshot", "fi_fused_twoshot"}


def test_crossover_and_lookup_between_measured_sizes():
    res = build_results({"nccl": [5, 5, 5, 20, 40], "symm_twoshot": [6, 6, 6, 10, 20]},
                        tokens=[1, 2, 4, 64, 512])
    e = entry_for(res)
    assert spans(e, "ar") == [(1, 4, "nccl"), (5, 512, "symm_twoshot")]
    table = tbl.merge_entry(tbl.new_table(), e)
    assert tbl.lookup(table, KEY, "ar", 4) == "nccl"
    assert tbl.lookup(table, KEY, "ar", 32) == "symm_twoshot"  # unmeasured: the larger neighbour's range
    assert tbl.lookup(table, KEY, "ar", 513) is None  # above what was measured
    assert tbl.lookup(table, "other|sm90|tp2|nvlink", "ar", 4) is None


def test_failed_numerics_excluded_everywhere():
    e = entry_for(build_results(H200_NET_US, failed={"fi_fused_oneshot": [64]}))
    assert "fi_fused_oneshot" not in e["ops"]["ar_rmsnorm"]["latency_us"]
    assert "T=[64]" in e["ops"]["ar_rmsnorm"]["excluded"]["fi_fused_oneshot"]
    # without it: NCCL+norm until two-shot fusion wins from T=128 (19.02 vs 29.26)
    assert spans(e, "ar_rmsnorm") == [(1, 64, "nccl_norm"), (65, 512, "fi_fused_twoshot")]


def test_unavailable_backend_recorded_not_chosen():
    net = {k: v for k, v in H200_NET_US.items() if not k.startswith("symm")}
    e = entry_for(build_results(net, unavailable={"symm_twoshot": "native P2P atomics absent"}))
    assert e["ops"]["ar"]["excluded"]["symm_twoshot"] == "not available: native P2P atomics absent"
    assert spans(e, "ar") == [(1, 512, "fi_ar_oneshot")]


def test_ties_go_to_the_conservative_backend():
    assert tbl.pick_fastest({"fi_fused_oneshot": 9.9, "nccl_norm": 10.1}) == "nccl_norm"  # within 3%
    assert tbl.pick_fastest({"fi_fused_oneshot": 9.0, "nccl_norm": 10.1}) == "fi_fused_oneshot"
    assert tbl.pick_fastest({"fi_fused_oneshot": 9.9, "nccl_norm": 10.1}, tie_rel=0.0) == "fi_fused_oneshot"
    assert tbl.pick_fastest({"zz_new": 5.0, "yy_new": 5.0}) == "yy_new"  # unknown names: stable by name
    assert tbl.pick_fastest({}) is None


def test_prefix_threshold():
    ts = [1, 2, 4, 8]
    assert tbl.prefix_threshold(ts, {1: 5, 2: 5, 4: 5, 8: 5}, {1: 10, 2: 10, 4: 10, 8: 10}) == 8
    assert tbl.prefix_threshold(ts, {1: 5, 2: 5, 4: 20, 8: 20}, {1: 10, 2: 10, 4: 10, 8: 10}) == 2
    assert tbl.prefix_threshold(ts, {1: 11, 2: 11, 4: 11, 8: 11}, {1: 10, 2: 10, 4: 10, 8: 10}) == 0
    assert tbl.prefix_threshold(ts, {1: 10, 2: 10}, {1: 10, 2: 10, 4: 10, 8: 10}) == 0  # no gain: default
    assert tbl.prefix_threshold(ts, {1: 5, 4: 1}, {1: 10, 2: 10, 4: 10, 8: 10}) == 1  # gap at 2 stops it


def test_validate_and_load(tmp_path):
    table = tbl.merge_entry(tbl.new_table(), entry_for(build_results(H200_NET_US)))
    assert tbl.validate_table(table) == []
    path = tbl.save_table(table, tmp_path / "t.json")
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]  # no temp file left behind
    assert tbl.load_table(path) == json.loads(path.read_text())

    bad = json.loads(path.read_text())
    e = bad["entries"].pop(KEY.key())
    bad["entries"]["wrong|sm90|tp2|nvlink"] = e
    assert any("key does not match" in p for p in tbl.validate_table(bad))
    e2 = json.loads(json.dumps(e))
    e2["ops"]["ar"]["ranges"][1]["tokens"][0] = 300
    assert any("ops.ar.ranges[1]" in p for p in tbl.validate_table({"schema": tbl.SCHEMA,
                                                                       "entries": {KEY.key(): e2}}))
    assert tbl.validate_table({"schema": "x", "entries": {}}) == [f"schema is 'x', expected '{tbl.SCHEMA}'"]

    with pytest.raises(UserError, match="no such all-reduce table"):
        tbl.load_table(tmp_path / "missing.json")
    (tmp_path / "broken.json").write_text("{")
    with pytest.raises(UserError, match="broken.json: not valid JSON"):
        tbl.load_table(tmp_path / "broken.json")
    (tmp_path / "bad.json").write_text(json.dumps(bad))
    with pytest.raises(UserError, match="bad.json: invalid all-reduce table"):
        tbl.load_table(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="refusing to write"):
        tbl.save_table(bad, tmp_path / "out.json")
    assert not (tmp_path / "out.json").exists()


def test_merge_keeps_other_topologies():
    a = entry_for(build_results(H200_NET_US))
    b = tbl.build_entry(build_results(H200_NET_US, tp=4), tbl.TopologyKey("NVIDIA H200", "9.0", 4, "nvlink"))
    t = tbl.merge_entry(tbl.merge_entry(tbl.new_table(), a), b)
    assert sorted(t["entries"]) == ["NVIDIA H200|sm90|tp2|nvlink", "NVIDIA H200|sm90|tp4|nvlink"]
    t2 = tbl.merge_entry(t, a)  # same key: replaced, not duplicated
    assert len(t2["entries"]) == 2


# ------------------------------------------------------------------------------------------- knobs

def knobs(results, **kw):
    table = tbl.merge_entry(tbl.new_table(), entry_for(results))
    return tbl.knobs_from_table(table, tbl.facts_key(H200_TOPOLOGY, results["config"]["tp"]), **kw)


def test_knobs_reference_measurement():
    k = knobs(build_results(H200_NET_US))
    assert k["matched"] and k["key"] == KEY.key()
    # fusion wins at every measured size; symm two-shot beats NCCL overall (summed saving), one-shot never
    # beats two-shot from the smallest size up
    assert k["decisions"]["fusion_max_tokens"] == 512
    assert k["decisions"]["symm_mem_max_tokens"] == 512
    assert k["decisions"]["symm_mem_oneshot_max_tokens"] == 0
    assert k["env"] == {"SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS": "512",
                        "SGLANG_TORCH_SYMM_MEM_MAX_SIZE": str(513 * H * E),
                        "SGLANG_TORCH_SYMM_MEM_ONESHOT_MAX_SIZE": "0"}
    assert k["server_args"]["0.5.14"] == ["--flashinfer-allreduce-fusion-backend", "trtllm",
                                          "--enable-torch-symm-mem"]
    assert k["server_args"]["0.5.9"] == ["--enable-flashinfer-allreduce-fusion", "--enable-torch-symm-mem"]
    assert any("fusion for T <= 512" in w for w in k["why"])


def test_knobs_fusion_off_when_runtime_variant_excluded():
    # one-shot fused failed numerics; two-shot is correct and wins from T=128, but sglang lets FlashInfer pick
    # the variant (one-shot at TP=2), so fusion must stay off
    k = knobs(build_results(H200_NET_US, failed={"fi_fused_oneshot": [3]}))
    assert k["decisions"]["fusion_max_tokens"] == 0
    assert k["env"]["SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS"] == "0"
    assert k["server_args"]["0.5.14"][:1] == ["--enforce-disable-flashinfer-allreduce-fusion"]
    assert "--enable-flashinfer-allreduce-fusion" not in k["server_args"]["0.5.9"]


def test_knobs_fusion_prefix_stops_where_unfused_wins():
    net = {"nccl": [8, 8, 8, 8], "nccl_norm": [10, 10, 10, 10], "fi_fused_oneshot": [5, 5, 30, 30]}
    k = knobs(build_results(net, tokens=[1, 2, 3, 4]))
    assert k["decisions"]["fusion_max_tokens"] == 2
    assert k["decisions"]["symm_mem_max_tokens"] == 0  # no symm-mem measured
    assert k["env"]["SGLANG_TORCH_SYMM_MEM_MAX_SIZE"] == "0"
    assert "--enable-torch-symm-mem" not in k["server_args"]["0.5.14"]


def test_knobs_unfused_path_uses_symm_where_enabled():
    # symm+norm makes the unfused path fast enough that fusion loses at T=4
    net = {"nccl": [8, 8, 8], "symm_twoshot": [4, 4, 4], "nccl_norm": [10, 10, 10],
           "symm_twoshot_norm": [6, 6, 6], "fi_fused_oneshot": [5, 5, 7]}
    k = knobs(build_results(net, tokens=[1, 2, 4]))
    assert k["decisions"]["symm_mem_max_tokens"] == 4
    assert k["decisions"]["fusion_max_tokens"] == 2


def test_knobs_use_the_recommended_nccl_profile():
    net = {"nccl": [10, 10], "nccl_norm": [12, 12], "fi_fused_oneshot": [11, 11]}
    r = build_results(net, tokens=[1, 2])
    r["nccl_profiles"] = {
        "none": {"latency_us": {k: r["latency_us"][k] for k in ("nccl", "nccl_norm")}},
        "pcie-ll": build_results({"nccl": [5, 5], "nccl_norm": [7, 7]}, tokens=[1, 2]),
    }
    k = knobs(r)
    assert k["nccl_profile"] == "pcie-ll"
    assert k["decisions"]["fusion_max_tokens"] == 0  # fused 11 us loses to NCCL+norm 7 us under pcie-ll
    r["nccl_profiles"]["pcie-ll"] = build_results({"nccl": [10.1, 10.1], "nccl_norm": [12, 12]},
                                                  tokens=[1, 2])
    k = knobs(r)
    assert k["nccl_profile"] == "none"  # within the tie margin: keep NCCL's defaults
    assert k["decisions"]["fusion_max_tokens"] == 2


def test_knobs_without_entry():
    k = tbl.knobs_from_table(tbl.new_table(), tbl.facts_key({"gpu_name": "NVIDIA RTX PRO 6000 Blackwell",
                                                             "capability": "12.0", "link": "pcie"}, 8))
    assert not k["matched"] and k["env"] == {} and k["server_args"]["0.5.14"] == []
    assert "NVIDIA RTX PRO 6000 Blackwell|sm120|tp8|pcie" in k["why"][0]


def test_default_table_path(monkeypatch, tmp_path):
    monkeypatch.setenv("SGLANG_BLACKWELL_ALLREDUCE_TABLE", str(tmp_path / "x.json"))
    assert tbl.default_table_path() == tmp_path / "x.json"
    monkeypatch.delenv("SGLANG_BLACKWELL_ALLREDUCE_TABLE")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert tbl.default_table_path() == tmp_path / "sglang-blackwell" / "allreduce_table.json"


def test_topology_key_of_a_detected_topology_names_its_link_kind():
    # the lab's first tune (2026-11-30) keyed its table by the repr of the bound method Topology.link, so
    # `serve` found no entry for 'NVIDIA H200|sm90|tp2|nvlink': the key must come from the link kind
    from sglang_blackwell.box.allreduce_table import topology_key
    from sglang_blackwell.box.topology import Topology

    nv = Topology.simulated(2, "9.0", kind="NV18", atomics=True)
    assert topology_key(nv, 2).key() == f"{nv.gpus[0].name}|sm90|tp2|nvlink"
    pcie = Topology.simulated(8, "12.0", kind="SYS", atomics=False, multicast=False)
    assert topology_key(pcie, 8).key().endswith("|sm120|tp8|pcie")
    assert tbl.facts_key({"gpu_name": "X", "capability": "12.0", "link": "pcie"}, 4).key() == "X|sm120|tp4|pcie"


def test_bench_topology_probe_takes_its_facts_from_the_shared_detection(tmp_path, monkeypatch):
    import json

    pytest.importorskip("torch")
    from sglang_blackwell.bench.allreduce import p2p_probe
    from sglang_blackwell.box.topology import TOPOLOGY_ENV, Topology

    f = tmp_path / "box.json"
    box = Topology.simulated(4, "9.0", kind="NV18", atomics=True)
    box.links[[(lk.a, lk.b) for lk in box.links].index((1, 3))].cuda_native_atomics = False
    f.write_text(json.dumps(box.to_dict()))
    monkeypatch.setenv(TOPOLOGY_ENV, str(f))
    facts = p2p_probe.detect_group([0, 1])
    assert facts["link"] == "nvlink" and facts["p2p_atomics"] is True and facts["capability"] == "9.0"
    assert facts["pairs"] == {"0->1": {"access": True, "native_atomics": True},
                              "1->0": {"access": True, "native_atomics": True}}
    assert tbl.facts_key(facts, 2).key() == tbl.topology_key(box, 2).key()
    facts = p2p_probe.detect_group([3, 1])  # the group as its ranks number it: the pair without atomics
    assert facts["devices"] == [3, 1] and facts["p2p_atomics"] is False and set(facts["pairs"]) == {"3->1", "1->3"}


# ------------------------------------------------------------------------------------ PCIe-IPC (0.5.23)

RTX8 = {"gpu_name": "NVIDIA RTX PRO 6000 Blackwell", "capability": "12.0", "link": "pcie"}


def pcie_knobs(results):
    entry = tbl.build_entry(results, tbl.facts_key(RTX8, 8))
    return tbl.knobs_from_table(tbl.merge_entry(tbl.new_table(), entry), tbl.facts_key(RTX8, 8))


def test_knobs_select_pcie_ipc_on_the_lines_that_have_it():
    """8 GPUs on PCIe (NCCL slow at small sizes, the shape the upstream module documents): PCIe-IPC wins up
    to T=8, NCCL above; on 0.5.23 the unfused path is PCIe-IPC + add+RMSNorm, which also beats fusion there."""
    net = {"nccl": [40, 40, 40, 40, 40], "nccl_norm": [42, 42, 42, 42, 42],
           "fi_pcie_ipc": [5, 5, 6, 8, 60], "fi_pcie_ipc_norm": [7, 7, 8, 10, 62],
           "fi_fused_oneshot": [20, 20, 20, 20, 20]}
    k = pcie_knobs(build_results(net, tokens=[1, 2, 4, 8, 16], tp=8))
    assert k["decisions"]["pcie_ipc_max_tokens"] == 8
    assert k["env_by_line"] == {"0.5.23": {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1",
                                           "SGLANG_PCIE_IPC_MAX_NUMEL": str(8 * H),
                                           "SGLANG_FLASHINFER_ALLREDUCE_FUSION_MAX_TOKENS": "0"}}
    # without PCIe-IPC (0.5.9 / 0.5.14) the fused kernel beats NCCL + norm at every size
    assert k["decisions"]["fusion_max_tokens"] == 16 and k["decisions"]["fusion_max_tokens_with_pcie_ipc"] == 0
    assert k["server_args"]["0.5.14"][:2] == ["--flashinfer-allreduce-fusion-backend", "trtllm"]
    assert k["server_args"]["0.5.23"] == ["--enforce-disable-flashinfer-allreduce-fusion"]
    assert any("PCIe-IPC all-reduce (sglang 0.5.23) for T <= 8" in w for w in k["why"])


def test_knobs_leave_pcie_ipc_off_where_it_loses_or_failed():
    net = {"nccl": [5, 5], "nccl_norm": [7, 7], "fi_pcie_ipc": [6, 6]}
    k = pcie_knobs(build_results(net, tokens=[1, 2], tp=8))
    assert k["decisions"]["pcie_ipc_max_tokens"] == 0 and k["env_by_line"] == {}
    assert any("PCIe-IPC all-reduce off" in w for w in k["why"])
    k = pcie_knobs(build_results({**net, "fi_pcie_ipc": [1, 1]}, tokens=[1, 2], tp=8,
                                 failed={"fi_pcie_ipc": [2]}))
    assert k["env_by_line"] == {} and any("not measured correct" in w for w in k["why"])
    k = pcie_knobs(build_results(net, tokens=[1, 2], tp=8, unavailable={"fi_pcie_ipc": "flashinfer 0.6.12"}))
    assert k["env_by_line"] == {}
