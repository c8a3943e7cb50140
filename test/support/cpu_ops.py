"""sglang registers its Python custom ops (e.g. sglang::flashinfer_allreduce_residual_rmsnorm) for the CUDA
dispatch key only. With tensors on the CPU the op would raise NotImplementedError before any of its Python
(the code under test) ran; also registering the same Python function for the CPU key lets it run here.
Call before importing the sglang modules that register ops."""

from __future__ import annotations


def register_custom_ops_for_cpu() -> None:
    import sglang.srt.utils.common as common

    original = common.direct_register_custom_op
    if getattr(original, "_cpu_too", False):
        return

    def direct_register_custom_op(op_name, op_func, mutates_args=None, fake_impl=None, target_lib=None):
        original(op_name, op_func, mutates_args=mutates_args, fake_impl=fake_impl, target_lib=target_lib)
        lib = target_lib or common.sglang_lib
        lib.impl(op_name, op_func, "CPU")

    direct_register_custom_op._cpu_too = True
    common.direct_register_custom_op = direct_register_custom_op
