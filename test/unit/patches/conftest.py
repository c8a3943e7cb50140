"""Per-patch tests run the patched wheel's own code in fresh interpreters (support/probe.py), against:

  with    - the trees `sglang-blackwell build` ships for the base (whole series applied)
  without - the tree with only the patches *before* this one (so the test must fail there)
  upstream - the unpatched release, for bases where upstream already has the change (the patch is dropped)

`assert_needs_patch` checks both directions: no problems with the patch, at least one without it.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[2]
if str(TEST_ROOT) not in sys.path:
    sys.path.insert(0, str(TEST_ROOT))

from sglang_blackwell.patchset.bases import list_bases, series_for  # noqa: E402
from support.probe import run_probe  # noqa: E402
from support.trees import TreeFactory  # noqa: E402

PACKAGES = ("sglang", "flashinfer")


def carrying(logical_id: str) -> list[str]:
    """Bases whose series carries the patch with this Logical-Id."""
    out = []
    for b in list_bases():
        for pkg in b.patched:
            if any(p.logical_id == logical_id for p in series_for(b, pkg.package).patches):
                out.append(b.name)
    return out


def absorbed(logical_id: str) -> list[str]:
    """Bases whose upstream release already has the change (base.toml `absorbed`): the patch is dropped there
    and its test must pass on the unpatched upstream code."""
    return [b.name for b in list_bases() if logical_id in b.absorbed]


# The scenarios of every fusion-path fix upstream absorbed (P3, P4), in one pair of CPU ranks per base: their
# tests share this probe (support.scenarios_fusion.absorbed_fusion_cases), so each base imports sglang once.
ABSORBED_FUSION_PROBE = """
import json
from support.scenarios_fusion import eagle3_summary
from support.tp import run_tp
ranks = run_tp(2, "support.scenarios_fusion:absorbed_fusion_cases")
print(json.dumps({"eagle3": eagle3_summary([r["eagle3"] for r in ranks]),
                  "fallback": {"ranks": [r["fallback"] for r in ranks]}}))
"""


class PatchTrees:
    def __init__(self, factory: TreeFactory):
        self.f = factory
        self._absorbed: dict[str, dict] = {}

    def _locate(self, base: str, logical_id: str) -> tuple[str, int]:
        for pkg in PACKAGES:
            idx = self.f.patch_index(base, pkg, logical_id)
            if idx is not None:
                return pkg, idx
        raise LookupError(f"base {base} carries no patch {logical_id}")

    def with_patch(self, base: str) -> list[Path]:
        return [self.f.built_tree(base, pkg) for pkg in PACKAGES]

    def upstream(self, base: str, package: str) -> list[Path]:
        """The unpatched release of `package`, beside the other package as built."""
        return [self.f.tree(base, p, 0) if p == package else self.f.built_tree(base, p) for p in PACKAGES]

    def assert_absorbed(self, base: str, package: str, code: str, problems: Callable[[dict], list[str]],
                        env: dict | None = None) -> dict:
        r = run_probe(self.upstream(base, package), code, env=env)
        assert problems(r) == [], f"{base}: upstream {package} does not have the change after all: {problems(r)}"
        return r

    def assert_absorbed_fusion(self, base: str, part: str, problems: Callable[[dict], list[str]]) -> dict:
        """assert_absorbed for the fusion-path fixes, from ABSORBED_FUSION_PROBE (run once per base)."""
        if base not in self._absorbed:
            self._absorbed[base] = run_probe(self.upstream(base, "sglang"), ABSORBED_FUSION_PROBE)
        r = self._absorbed[base][part]
        assert problems(r) == [], f"{base}: upstream sglang does not have the change after all: {problems(r)}"
        return r

    def without_patch(self, base: str, logical_id: str) -> list[Path]:
        pkg, idx = self._locate(base, logical_id)
        return [self.f.tree(base, p, idx) if p == pkg else self.f.built_tree(base, p) for p in PACKAGES]

    def assert_needs_patch(self, base: str, logical_id: str, code: str, problems: Callable[[dict], list[str]],
                           env: dict | None = None) -> dict:
        good = run_probe(self.with_patch(base), code, env=env)
        assert problems(good) == [], f"{base} with {logical_id}: {problems(good)} (probe said {good})"
        bad = run_probe(self.without_patch(base, logical_id), code, env=env)
        assert problems(bad), (f"{base} without {logical_id}: the test passes anyway (probe said {bad}); "
                               "it cannot detect the bug the patch fixes")
        return {"with": good, "without": bad}


@pytest.fixture(scope="session")
def patch_trees(tree_factory: TreeFactory) -> PatchTrees:
    return PatchTrees(tree_factory)
