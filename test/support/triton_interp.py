"""Triton's interpreter (TRITON_INTERPRET=1) as a reference machine for kernels on CPU tensors, with one fix.

Triton 3.9's interpreter keeps bfloat16 tensors as their uint16 bit patterns (numpy has no bfloat16) and its
`create_dot` multiplies those patterns as integers: a bf16 x bf16 `tl.dot` returns garbage (a 16x32 @ 32x16
product of N(0, 1) values came out ~5e10 off), while casts, loads, stores and fp8 dots (converted to fp16
first) are right. `fix_bf16_dot()` converts bf16 operands to fp32 before the product, which is what the
tensor cores compute for bf16 inputs (exact products, fp32 accumulation). It checks itself: it patches only an
interpreter that gets the product wrong, and raises if the patched one still does.
"""

from __future__ import annotations

import os


def _probe_dot_error() -> float:
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def _dot(X, Y, Out):
        r = tl.arange(0, 16)
        c = tl.arange(0, 32)
        x = tl.load(X + r[:, None] * 32 + c[None, :])
        y = tl.load(Y + c[:, None] * 16 + r[None, :])
        tl.store(Out + r[:, None] * 16 + r[None, :], tl.dot(x, y))

    g = torch.Generator().manual_seed(0)
    x = torch.randn(16, 32, generator=g).bfloat16()
    y = torch.randn(32, 16, generator=g).bfloat16()
    out = torch.zeros(16, 16)
    _dot[(1,)](x, y, out)
    return float((out - x.float() @ y.float()).abs().max())


def fix_bf16_dot() -> bool:
    """Make the interpreter's bf16 `tl.dot` right; True if it had to be patched. TRITON_INTERPRET must be 1."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("fix_bf16_dot: TRITON_INTERPRET=1 must be set before the kernels are defined")
    import numpy as np
    import triton.language as tl
    from triton.runtime import interpreter

    if _probe_dot_error() < 1e-4:
        return False
    builder = interpreter.InterpreterBuilder
    original = builder.create_dot

    def to_fp32(h):
        if h.dtype.scalar != tl.bfloat16:
            return h
        data = interpreter._convert_float(h.data, tl.bfloat16, tl.float32, None).view(np.float32)
        return interpreter.TensorHandle(data, tl.float32)

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        return original(self, to_fp32(a), to_fp32(b), d, input_precision, max_num_imprecise_acc)

    builder.create_dot = create_dot
    err = _probe_dot_error()
    if err >= 1e-4:
        raise RuntimeError(f"fix_bf16_dot: the interpreter's bf16 dot is still {err:g} off after the fix")
    return True
