"""Runs in the AOT build interpreter (see aot.py), with the FlashInfer tree first on PYTHONPATH and
FLASHINFER_CUDA_ARCH_LIST set: builds each named JIT module with FlashInfer's own spec and copies the .so to
OUTDIR/<name>/<name>.so. Standalone on purpose: the build interpreter need not have sglang-blackwell installed.

    python aot_worker.py OUTDIR name=module:generator ...

Prints one line `AOT-RESULT {json}` per module: {"name", "so", "seconds", "flashinfer"} or {"name", "error"}.
"""

import ctypes
import glob
import importlib
import json
import os
import shutil
import sys
import time
import traceback
from pathlib import Path


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    failed = 0
    # a CUDA build of torch on a machine without a driver: make the toolkit's libcudart resolvable for what
    # importing flashinfer loads
    cudart = sorted(glob.glob(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64", "libcudart.so*")))
    if cudart:
        ctypes.CDLL(cudart[0], mode=ctypes.RTLD_GLOBAL)
    for item in argv[1:]:
        name, _, target = item.partition("=")
        module, _, gen = target.partition(":")
        t0 = time.monotonic()
        try:
            import flashinfer

            spec = getattr(importlib.import_module(module), gen)()
            if spec.name != name:
                raise RuntimeError(f"{module}.{gen}() made a spec named {spec.name!r}, expected {name!r}")
            spec.build(verbose=False)
            so = Path(spec.jit_library_path)  # never the AOT path: the tree's AOT slots are not unpacked
            dest = out / name / f"{name}.so"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(so, dest)
            res = {"name": name, "so": str(dest), "seconds": round(time.monotonic() - t0, 1),
                   "flashinfer": str(Path(flashinfer.__file__).parent)}
        except Exception as e:  # reported to the parent, which raises a UserError naming the module
            tail = traceback.format_exc().strip().splitlines()[-12:]
            cause = getattr(e, "__cause__", None)
            res = {"name": name, "error": f"{type(e).__name__}: {e}" + (f" (cause: {cause})" if cause else "")
                   + "\n" + "\n".join(tail)}
            failed += 1
        print("AOT-RESULT " + json.dumps(res), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
