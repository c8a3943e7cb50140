"""Import-only stand-ins for binary packages the CPU test environment cannot have.

torchvision: sglang imports it at module level in vision-model code no test here exercises; PyPI's torchvision
cannot load beside the CPU torch 2.13 build ("operator torchvision::nms does not exist").
sgl_kernel: the CUDA kernel wheel (hundreds of MB, needs libcuda); with a simulated GPU, sglang imports kernels
from it at module level.

Every attribute of a stand-in is a placeholder that raises if it is ever *used* (called), so a test that
accidentally depends on a real kernel fails loudly instead of passing.
"""

import importlib.abc
import importlib.machinery
import sys
import types


class Unavailable:
    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, key):
        return Unavailable(f"{self._name}.{key}")

    def __call__(self, *args, **kwargs):
        raise RuntimeError(f"{self._name}: not available in the CPU test environment (import-only stand-in)")

    def __mro_entries__(self, bases):
        return (object,)


class StandinModule(types.ModuleType):
    def __getattr__(self, key):
        if key.startswith("__"):
            raise AttributeError(key)
        return Unavailable(f"{self.__name__}.{key}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def __init__(self, root: str):
        self.root = root

    def find_spec(self, name, path, target=None):
        if name.startswith(self.root + "."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return StandinModule(spec.name)

    def exec_module(self, module):
        module.__path__ = []


def install(module_globals: dict, root: str, version: str) -> None:
    """Make the package whose __init__ calls this a stand-in (submodules included)."""
    sys.meta_path.insert(0, _Finder(root))
    module_globals["__path__"] = []
    module_globals["__version__"] = version
    module_globals["__getattr__"] = lambda key: (_raise(key) if key.startswith("__")
                                                 else Unavailable(f"{root}.{key}"))


def _raise(key):
    raise AttributeError(key)
