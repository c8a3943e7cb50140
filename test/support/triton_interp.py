"""Triton's interpreter (TRITON_INTERPRET=1) as a reference machine for kernels on CPU tensors, with one fix.

Triton 3.9's interpreter keeps bfloat16 tensors as their uint16 bit patterns (numpy has no bfloat16) and its
`create_dot` multiplies those patterns as integers: a bf16 x bf16 `tl.dot` returns garbage (a 16x32 @ 32x16
product of N(0, 1) values came out ~5e10 off), while casts, loads, stores and fp8 dots (converted to fp16
first) are right. `fix_bf16_dot()` converts bf16 operands to fp32 before the product, which is what the
tensor cores compute for bf16 inputs (exact products, fp32 accumulation). It checks itself: it patches only an
interpreter that gets the product wrong, and raises if the patched one still does. `patch_lang_once_per_launch()`
takes out work the interpreter repeats on every nested @triton.jit call, which changes no result.
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
    """Make the interpreter's bf16 `tl.dot` right; True if it had to be patched. TRITON_INTERPRET must be 1.
    Every probe that runs kernels under the interpreter calls it first, so it also installs
    patch_lang_once_per_launch (the same results, less time)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        raise RuntimeError("fix_bf16_dot: TRITON_INTERPRET=1 must be set before the kernels are defined")
    patch_lang_once_per_launch()
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


def patch_lang_once_per_launch() -> bool:
    """Make the interpreter's device-function calls cheaper, computing the same; True if it was installed.

    Triton 3.9's interpreter calls `_patch_lang(fn)` on every call of a nested @triton.jit function: it walks
    triton.language, its tensor and math modules with inspect.getmembers and sets the interpreter's versions of
    the builtins found there. Inside one launch (GridExecutor.__call__) the launch's own `_patch_lang` has already
    done so and nothing is restored before the launch ends, so a second call from a module whose globals were
    patched in this launch finds no builtin left to wrap and sets the same functions again (every value it sets is
    a fixed function, none wraps the one before): a no-op, a fifth of a split-KV kernel case's time under the
    interpreter (cProfile, P11's MLA case on 0.5.14: 1.96 of 8.9 s). Here the first call per module globals and
    launch patches, as before; the repeats skip it. Any other Triton: nothing changed (False)."""
    import triton
    from triton.runtime import interpreter

    if triton.__version__ != "3.9.0":
        return False
    if getattr(interpreter.InterpretedFunction.__call__, "_sglb_once", False):
        return True
    patched: set[int] = set()  # id(fn.__globals__) of the functions patched in the running launch
    launch = interpreter.GridExecutor.__call__

    def grid_call(self, *args, **kwargs):
        patched.clear()
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.clear()

    def device_call(self, *args, **kwargs):  # InterpretedFunction.__call__ of triton 3.9.0, the patch made once
        if id(self.fn.__globals__) not in patched:
            interpreter._patch_lang(self.fn)
            patched.add(id(self.fn.__globals__))
        fn = self.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            raise interpreter.InterpreterError(repr(e)) from e

    device_call._sglb_once = True
    interpreter.GridExecutor.__call__ = grid_call
    interpreter.InterpretedFunction.__call__ = device_call
    return True
