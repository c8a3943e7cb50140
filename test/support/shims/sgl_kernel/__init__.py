"""Import-only stand-in for sgl_kernel (see ../_standin.py).

The real package also defines torch ops (torch.ops.sgl_kernel.*) from its .so, and sglang registers fake
(meta) implementations for some of them at import time. Without the .so those ops do not exist, so fake
registrations for sgl_kernel:: ops are skipped here (they would only matter under torch.compile).
"""

import _standin
import torch.library

_standin.install(globals(), "sgl_kernel", "0.0+cpu-test-standin")

_register_fake = torch.library.register_fake


def _register_fake_unless_missing_sgl_kernel_op(op, *args, **kwargs):
    name = op if isinstance(op, str) else getattr(op, "__name__", "")
    if isinstance(name, str) and name.startswith("sgl_kernel::"):
        ns, opname = name.split("::", 1)
        if not hasattr(getattr(torch.ops, ns), opname.split(".")[0]):
            return (lambda fn: fn) if not args else args[0]
    return _register_fake(op, *args, **kwargs)


torch.library.register_fake = _register_fake_unless_missing_sgl_kernel_op
