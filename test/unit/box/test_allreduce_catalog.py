"""The all-reduce catalog is the one list of backend names: the tuned table ranks every one of them (and nothing
else), and the paths plan explains every one of them (the SGLang path that runs it) or says why SGLang never
selects it on its own path."""

from __future__ import annotations

from sglang_blackwell.box.allreduce_catalog import CATALOG, PREFERENCE, SGLANG_PATHS
from sglang_blackwell.box.allreduce_paths import RULES, Facts, fused_ar_norm


def test_preference_ranks_every_catalog_backend_once():
    assert len(set(PREFERENCE)) == len(PREFERENCE), "a name ranked twice"
    assert sorted(set(CATALOG) - set(PREFERENCE)) == [], "catalog backends PREFERENCE does not rank"
    assert sorted(set(PREFERENCE) - set(CATALOG)) == [], "PREFERENCE names that are not catalog backends"


def rule_ids() -> set[str]:
    """The path id of every rule of allreduce_paths (SGLang's dispatch order, then the fused AR+RMSNorm)."""
    f = Facts(tp=2, capability="12.0")
    return {rule(f).id for rule in (*RULES, fused_ar_norm)}


def test_the_catalog_names_every_rule_of_allreduce_paths():
    assert sorted(rule_ids()) == sorted(SGLANG_PATHS)


def test_every_catalog_backend_is_explained_by_a_paths_rule_or_never_selected():
    ids = rule_ids()
    for name, b in CATALOG.items():
        assert bool(b.sglang_path) != bool(b.never_selected), f"{name}: needs a path or a reason, not both"
        if b.sglang_path:
            assert b.sglang_path in ids, f"{name}: {b.sglang_path!r} is no rule of allreduce_paths ({sorted(ids)})"
