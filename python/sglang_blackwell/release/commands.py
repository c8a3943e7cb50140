"""The CLI verbs of a release (image, changelog): each `cmd_<verb>` runs one parsed command line and returns its
exit code; cli.py parses and calls it, and imports this module only for these verbs. changelog is here, not in
patchset/, because it reads the checkout's root (image.checkout_root) and patchset may not import release."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import UserError
from ..patchset.plural import counted
from ..paths import write_atomic


def cmd_image(a: argparse.Namespace) -> int:
    from . import image

    if a.action == "facts":
        print(image.format_facts(image.facts(), a.get, a.github_output), end="")
        return 0
    if a.action == "check":
        from .pins import check_pins, check_release

        root = image.checkout_root()
        rep = check_release(root, a.tag) if a.release else check_pins(root)
        for n in rep.notes:
            print(f"note: {n}")
        for p in rep.problems:
            print(f"ERROR: {p}", file=sys.stderr)
        print(f"image check{' --release' if a.release else ''}: "
              f"{'OK' if rep.ok else counted(len(rep.problems), 'problem')}")
        return 0 if rep.ok else 1
    from ..patchset.bases import get_base

    base = get_base(a.base)
    if a.action == "labels":
        print(image.format_labels(image.image_labels(base, Path(a.dist)), a.format), end="")
        return 0
    from ..artifacts.aot import parse_archs

    if not a.python:
        raise UserError("image verify: --python (the environment's interpreter) is required")
    probs = image.verify(base, Path(a.dist), a.python, nccl_profile=a.nccl_profile,
                         aot_archs=parse_archs(a.aot) if a.aot else None, cuda_wheels=not a.skip_cuda_wheels)
    for p in probs:
        print(f"PROBLEM: {p}", file=sys.stderr)
    print(f"image verify {a.python}: {'OK' if not probs else counted(len(probs), 'problem')} "
          f"(base {base.name}, manifest {Path(a.dist)})")
    return 1 if probs else 0


def cmd_changelog(a: argparse.Namespace) -> int:
    from ..patchset.changelog import WORKTREE, changelog_bases, changelog_refs, previous_tag
    from .image import checkout_root

    root = checkout_root()
    if a.bases:
        text = changelog_bases(root, a.bases[0], a.bases[1], a.to or WORKTREE)
    else:
        old = a.from_ref or previous_tag(root, a.to or "HEAD")  # None: no earlier tag, a first release
        text = changelog_refs(root, old, a.to or WORKTREE)
    if a.out:
        out = Path(a.out)
        write_atomic(out, text)
        print(f"wrote {out}", file=sys.stderr)
    else:
        print(text, end="")
    return 0
