"""Runs inside the JIT build interpreter (a venv with the target's torch, apache-tvm-ffi and FlashInfer's other
dependencies; the patched FlashInfer first on PYTHONPATH). Builds FlashInfer JIT modules with nvcc and copies
each `<name>.so` to OUT/<name>/<name>.so, the layout of FlashInfer's AOT directory.

    python flashinfer_aot_builder.py OUT name=module:function [...]

Environment (set by flashinfer_aot.py): CUDA_HOME, FLASHINFER_CUDA_ARCH_LIST, FLASHINFER_WORKSPACE_BASE,
FLASHINFER_EXTRA_LDFLAGS (-L<dir with a libcuda.so to link against>), FLASHINFER_EXTRA_CUDAFLAGS.
Prints one JSON line per module: {"name", "seconds", "size", "flashinfer", "torch"}.
Standalone on purpose (stdlib + the build venv): it must not import sglang_blackwell.
"""

import ctypes
import glob
import importlib
import json
import os
import shutil
import sys
import time


def main(argv):
    out, items = argv[0], argv[1:]
    # torch's CUDA build without a driver: make libcudart resolvable for the modules FlashInfer dlopens
    cudart = sorted(glob.glob(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64", "libcudart.so*")))
    if cudart:
        ctypes.CDLL(cudart[0], mode=ctypes.RTLD_GLOBAL)
    import flashinfer

    try:
        import torch

        torch_version = torch.__version__
    except ImportError:  # FlashInfer itself needs it; a stand-in may not
        torch_version = None

    for item in items:
        name, _, target = item.partition("=")
        module, _, func = target.partition(":")
        spec = getattr(importlib.import_module(module), func)()
        t = time.time()
        spec.build(verbose=os.environ.get("FLASHINFER_JIT_VERBOSE") == "1")
        so = str(spec.get_library_path())
        dest = os.path.join(out, name, name + ".so")
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(so, dest)
        print(json.dumps({"name": name, "seconds": round(time.time() - t, 1), "size": os.path.getsize(dest),
                          "flashinfer": getattr(flashinfer, "__file__", ""), "torch": torch_version}),
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
