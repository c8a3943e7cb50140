"""`sglang-blackwell changelog`: series changes between git tags (added / changed / refreshed / status /
absorbed / dropped) in a real git repository, and between base lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from sglang_blackwell.patchset.changelog import changelog_bases, changelog_refs
from support.wheel_world import PATCH_TEMPLATE

BASE_TOML = """[base]
name = "{name}"
role = "test"
local_label = "{label}"
cuda = "13.0"

[[patched]]
package = "sglang"
distribution = "sglang"
version = "{version}"
files = []
"""


def patch(lid: str, path: str, old: str, new: str, line: int = 1, status: str = "Pending",
          context: str = "ctx") -> str:
    diff = (f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -{line},2 +{line},2 @@\n"
            f" {context}\n-{old}\n+{new}\n")
    return PATCH_TEMPLATE.format(subject=f"change {lid}", body=f"Why {lid}.", lid=lid, path=path,
                                 diff=diff).replace("Upstream-Status: Pending", f"Upstream-Status: {status}")


def write_base(root: Path, name: str, version: str, label: str, patches: dict[str, str],
               series_extra: str = "") -> None:
    d = root / "patches" / name
    (d / "sglang").mkdir(parents=True, exist_ok=True)
    for f in (d / "sglang").glob("*.patch"):
        f.unlink()
    (d / "base.toml").write_text(BASE_TOML.format(name=name, version=version, label=label))
    for fname, body in patches.items():
        (d / "sglang" / fname).write_text(body)
    (d / "sglang" / "series").write_text(series_extra + "".join(f + "\n" for f in patches))


def git(root: Path, *args: str) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@e")
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, env=env)


def test_changes_between_tags(tmp_path):
    root = tmp_path / "repo"
    root.mkdir()
    git(root, "init", "-q")
    write_base(root, "1.0", "1.0", "sm120.1", {
        "0001-a.patch": patch("P1", "python/sglang/a.py", "x = 1", "x = 2"),
        "0002-b.patch": patch("P2", "python/sglang/b.py", "y = 1", "y = 2"),
        "0003-c.patch": patch("P3", "python/sglang/c.py", "z = 1", "z = 2", status="Backport [https://x/pr/1]"),
        "0004-d.patch": patch("P4", "python/sglang/d.py", "w = 1", "w = 2"),
        "0005-e.patch": patch("P5", "python/sglang/e.py", "v = 1", "v = 2"),
    })
    git(root, "add", "-A")
    git(root, "commit", "-qm", "v1")
    git(root, "tag", "v1")
    write_base(root, "1.0", "1.1", "sm120.2", {
        "0001-a.patch": patch("P1", "python/sglang/a.py", "x = 1", "x = 3"),  # the change itself
        "0002-b.patch": patch("P2", "python/sglang/b.py", "y = 1", "y = 2", line=40, context="moved"),
        "0003-e.patch": patch("P5", "python/sglang/e.py", "v = 1", "v = 2", status="Submitted [https://x/pr/5]"),
        "0004-f.patch": patch("P6", "python/sglang/f.py", "u = 1", "u = 2"),
    }, series_extra="# absorbed: P3 upstream 1.1 (https://x/pr/1)\n")
    out = changelog_refs(root, "v1")
    assert out.splitlines()[0] == "## Patch series: v1 -> working tree"
    for line in [
        "- local label +sm120.1 -> +sm120.2",
        "- sglang: upstream 1.0 -> 1.1",
        "- sglang: changed P1 `0001-a.patch`: change P1",
        "- sglang: refreshed P2 `0002-b.patch` (same change; context or line numbers moved)",
        "- sglang: P5 renamed `0005-e.patch` -> `0003-e.patch`",
        "- sglang: P5 Upstream-Status: Pending -> Submitted [https://x/pr/5]",
        "- sglang: added P6 `0004-f.patch`: change P6 (Upstream-Status: Pending)",
        "- sglang: dropped P3 `0003-c.patch`: absorbed upstream (upstream 1.1 (https://x/pr/1))",
        "- sglang: dropped P4 `0004-d.patch`: change P4",
    ]:
        assert line in out, (line, out)
    git(root, "add", "-A")
    git(root, "commit", "-qm", "v2")
    git(root, "tag", "v2")
    assert changelog_refs(root, "v1", "v2") == out.replace("working tree", "v2")

    r = subprocess.run([sys.executable, "-m", "sglang_blackwell.cli", "changelog", "--from", "nope"],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "'nope' is not a git ref" in r.stderr


def test_changes_between_base_lines(tmp_path):
    root = tmp_path / "repo"
    write_base(root, "1.0", "1.0", "sm120.1", {
        "0001-a.patch": patch("P1", "python/sglang/a.py", "x = 1", "x = 2", status="Backport [PR 1, in 1.5+]"),
        "0002-b.patch": patch("P2", "python/sglang/b.py", "y = 1", "y = 2", status="Backport [PR 2, in 3.0+]"),
    })
    write_base(root, "2.0", "2.0", "sm120.1", {})
    out = changelog_bases(root, "1.0", "2.0")
    assert ("- sglang: dropped P1 `0001-a.patch`: absorbed upstream (its Upstream-Status says upstream has it "
            "from 1.5; upstream is now 2.0)") in out
    assert "- sglang: dropped P2 `0002-b.patch`: NOT absorbed: upstream has it from 3.0, this line is on 2.0" in out


def test_absorbed_declared_in_base_toml(tmp_path):
    """`[base] absorbed` in the new base.toml (what `check` reads) names where upstream has a dropped patch."""
    root = tmp_path / "repo"
    write_base(root, "1.0", "1.0", "sm120.1", {
        "0001-a.patch": patch("P3", "python/sglang/a.py", "x = 1", "x = 2", status="Backport [PR 7]"),
    })
    write_base(root, "2.0", "2.0", "sm120.1", {})
    toml = root / "patches" / "2.0" / "base.toml"
    declared = 'cuda = "13.0"\nabsorbed = { P3 = "upstream 2.0 (PR 7)" }\n'
    toml.write_text(toml.read_text().replace('cuda = "13.0"\n', declared))
    out = changelog_bases(root, "1.0", "2.0")
    assert "- sglang: dropped P3 `0001-a.patch`: absorbed upstream (upstream 2.0 (PR 7))" in out


def test_real_base_lines_name_p3_absorbed():
    """0.5.9 -> 0.5.14 on the repository itself: P3 is absorbed (patches/0.5.14/base.toml says where)."""
    out = changelog_bases(Path(__file__).resolve().parents[3], "0.5.9", "0.5.14")
    assert "- sglang: dropped P3 `0002-eagle3-aux-capture-after-fused-allreduce.patch`: absorbed upstream (sglang " \
           "0.5.14 (PR #28343" in out
