"""Can `make image-test` run here? Its gate, run before any build work, and the reason test/image skips.

`make image-test` builds docker/Dockerfile with Debian's buildah on a debootstrapped stand-in base: it needs
buildah and debootstrap on PATH and root (debootstrap, and buildah's vfs storage). Where one is missing the make
target prints one line, `image-test: NOT RUN: <what> (<how to get it>)`, and exits 2 (the project's code for a
bad environment): a run that did not happen must not read as a pass. SGLANG_BLACKWELL_IMAGE_TEST=0 (the name
.ci/run and ci.yml already use for "not in this job") asks for the skip: the Makefile then prints
`image-test: SKIPPED (asked: SGLANG_BLACKWELL_IMAGE_TEST=0)` and exits 0 without running this.

Standard library only: the Makefile runs it with the system python3, before the test venv exists.
"""

from __future__ import annotations

import os
import shutil
import sys

IMAGE_TEST_ENV = "SGLANG_BLACKWELL_IMAGE_TEST"  # 1 (default): run; 0: skip, saying so (the Makefile's ifeq)
TOOLS = ("buildah", "debootstrap")


def blockers() -> list[str]:
    """What stops the image build here, one phrase each with its fix (empty: nothing)."""
    out = []
    missing = [t for t in TOOLS if shutil.which(t) is None]
    if missing:
        out.append(f"{', '.join(missing)} not found (apt-get install {' '.join(missing)}, as root)")
    if os.geteuid() != 0:
        out.append(f"not root (uid {os.geteuid()}): debootstrap and buildah's vfs storage need it "
                   "(sudo --preserve-env=HOME make image-test)")
    return out


def main() -> int:
    asked = os.environ.get(IMAGE_TEST_ENV) or "1"  # unset or empty: the default, as in .ci/run
    if asked not in ("0", "1"):
        print(f"image-test: {IMAGE_TEST_ENV}={asked!r}: expected 1 (run, the default) or 0 (skip, saying so)",
              file=sys.stderr)
        return 2
    problems = blockers()
    if problems:
        print(f"image-test: NOT RUN: {'; '.join(problems)}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
