"""CUDA library headers the AOT build needs (cuBLAS, cuRAND), for CPU machines whose CUDA toolkit lacks them.

A CUDA devel toolkit (the CI container, the Docker builder) has them under $CUDA_HOME/include and this returns
nothing. Elsewhere (a pip-installed nvcc, as on our build machines) the headers are taken from NVIDIA's pinned
PyPI wheels (the same files a torch +cu130 install puts under nvidia/cu13/include): downloaded once, verified
against the pinned sha256 and size by fetch.py, cached; only `nvidia/cu13/include/` is extracted.
"""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

from sglang_blackwell.artifacts.aot import REQUIRED_HEADERS, find_cuda_home
from sglang_blackwell.patchset.bases import Artifact
from sglang_blackwell.patchset.fetch import fetch
from sglang_blackwell.paths import cache_dir

HEADER_WHEELS = (
    Artifact("nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl",
             "https://files.pythonhosted.org/packages/28/d4/30e630055d8e0f7058cc0d39e562c965d692f4735537d3f02f45d579a280/"
             "nvidia_cublas-13.0.2.14-py3-none-manylinux_2_27_x86_64.whl",
             "0cf238ffdbe46c00cb9aa98e7bca745c223a5ca5a53e686ac8b3e5a08fe80d6c", 420882912),
    Artifact("nvidia_curand-10.4.5.25-py3-none-manylinux_2_27_x86_64.whl",
             "https://files.pythonhosted.org/packages/12/63/636e5dc9afb2959bfc0042a357d5567358df829b66c96d9fc36d77dc0596/"
             "nvidia_curand-10.4.5.25-py3-none-manylinux_2_27_x86_64.whl",
             "22bb226a857e5888fe6b54ae465fc4371296bcff13a35f79e19691bcf454f529", 77113015),
)
PREFIX = "nvidia/cu13/include/"


def extra_include_dirs() -> list[Path]:
    """[] when the toolkit has the headers, else [a cached include dir holding them]."""
    home = find_cuda_home()
    if all((home / "include" / h).is_file() for h in REQUIRED_HEADERS):
        return []
    dest = cache_dir() / "cuda-headers" / "cu13"
    if not all((dest / h).is_file() for h in REQUIRED_HEADERS):
        tmp = dest.with_name(f".cu13.{os.getpid()}")
        for art in HEADER_WHEELS:
            with zipfile.ZipFile(fetch(art)) as z:
                for info in z.infolist():
                    if info.filename.startswith(PREFIX) and not info.is_dir():
                        target = tmp / info.filename[len(PREFIX):]
                        target.parent.mkdir(parents=True, exist_ok=True)
                        target.write_bytes(z.read(info))
        dest.parent.mkdir(parents=True, exist_ok=True)
        if dest.exists():
            import shutil

            shutil.rmtree(dest)
        os.replace(tmp, dest)
    return [dest]
