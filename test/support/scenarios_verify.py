"""P8 (split-KV target-verify attention on CUDA): the scenarios its probe runs against a patched sglang tree.

- `kernel_cases`: the line's split-KV verify entry (`verify_shared_kv_fwd`: ours in 0.5.14's
  `triton_ops/verify_shared_kv.py`, upstream's grouped-head `verify_mla.py` in 0.5.23) against the line's own
  `extend_attention_fwd` and an fp64 reference, on CPU tensors under Triton's interpreter, at MLA's shapes
  (one 512 + 64 latent KV head, 8-16 query heads, 3-4 draft tokens, bf16 and fp8 KV). Each error is checked
  against a bound derived from where the kernels round (see `error_bound`).
- `split_counts`: how many splits 0.5.14's kernel gives a prefix (its in-kernel rule) per GPU, batch and length.
- `gate_cases`: which simulated GPUs (support.cuda_sim) the line's backend sends target-verify to it on.
- `dispatch_case` (0.5.14, where the patch adds the dispatch): `TritonAttnBackend.forward_extend` in
  TARGET_VERIFY mode runs the split-KV kernel and returns what `extend_attention_fwd` returns.
- `compile_cases`: the exact launch the line makes (its constexprs and launch options, captured from the real
  launcher), compiled by Triton for sm_90a and sm_120a without a GPU: shared memory within the SM's limit and
  no register spills (ptxas' stack frame, read with the cuobjdump Triton ships).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import subprocess
import tempfile
from types import SimpleNamespace
from typing import Any

VERIFY_MODULES = ("sglang.srt.layers.attention.triton_ops.verify_shared_kv",  # 0.5.14 with P8
                  "sglang.kernels.ops.attention.verify_mla")                    # 0.5.23 (upstream's)
EXTEND_MODULES = ("sglang.srt.layers.attention.triton_ops.extend_attention",
                  "sglang.kernels.ops.attention.extend_attention")
BACKEND = "sglang.srt.layers.attention.triton_backend"
# the simulated GPUs: (capability, SM count) of an H200 (the lab) and an RTX PRO 6000 Blackwell (the target)
ARCHS = {"sm90": ((9, 0), 132), "sm120": ((12, 0), 188)}
# cudaDevAttrMaxSharedMemoryPerBlockOptin: 227 KB on SM90, 99 KB on SM120/SM121
SHARED_LIMIT = {90: 232448, 120: 101376}
U_BF16 = 2.0**-8  # unit roundoff of bfloat16 (8 significand bits)
U_FP8 = 2.0**-4  # float8_e4m3fn (4 significand bits)
FP8_ABS = 2.0**-10  # half the smallest e4m3 subnormal (2^-9): the absolute rounding error of a tiny value
U_FP32 = 2.0**-24

CASES = [  # the kimi61 pair's and Kimi-K2.x TP8's shapes: 8 heads/rank; DeepSeek-V3 TP8: 16
    {"arch": "sm90", "bs": 2, "h": 8, "draft": 3, "prefix": [37, 300], "kv": "bf16"},
    {"arch": "sm120", "bs": 1, "h": 8, "draft": 3, "prefix": [700], "kv": "bf16"},  # 6 splits, the last short
    {"arch": "sm90", "bs": 3, "h": 16, "draft": 4, "prefix": [1, 129, 520], "kv": "bf16"},
    {"arch": "sm120", "bs": 4, "h": 8, "draft": 3, "prefix": [5, 64, 200, 300], "kv": "bf16"},
    {"arch": "sm90", "bs": 2, "h": 8, "draft": 3, "prefix": [37, 300], "kv": "fp8", "k_scale": 0.5,
     "v_scale": 2.0},
    # the long-prefix rule at a size the interpreter runs (0.5.14's SHORT_SPLITS / LONG_CHUNK scaled down to 2 and
    # 128 tokens): 1100 tokens take 9 splits, not 2; beside it a short prefix that keeps its 2
    {"arch": "sm90", "bs": 1, "h": 8, "draft": 3, "prefix": [1100], "kv": "bf16", "split_rule": (2, 128)},
    {"arch": "sm120", "bs": 2, "h": 8, "draft": 3, "prefix": [40, 1000], "kv": "bf16", "split_rule": (2, 128)},
]
# prefix lengths the split rule is asked about (split_counts): short ones, the 64k edge, the lab's 96k / 128k / 256k
SPLIT_PREFIXES = (1, 700, 8192, 32768, 65536, 65537, 98304, 131072, 262144)


def _first_module(names: tuple[str, ...]):
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    return None


def verify_module():
    """The line's split-KV verify module, or None (a tree without it)."""
    m = _first_module(VERIFY_MODULES)
    return m if m is not None and hasattr(m, "verify_shared_kv_fwd") else None


def _simulate_arch(module, arch: str) -> None:
    """Our 0.5.14 kernel plans from the device's capability and SM count; on CPU tensors it asks these two."""
    capability, sms = ARCHS[arch]
    if hasattr(module, "_device_capability"):
        module._device_capability = lambda device: capability
        module._sm_count = lambda device: sms
    for cache in ("_SCRATCH", "_VMLA_CACHE"):
        if hasattr(module, cache):
            getattr(module, cache).clear()


def make_inputs(case: dict, seed: int = 0) -> dict:
    import torch

    g = torch.Generator().manual_seed(seed)
    bs, h, draft, d, dv = case["bs"], case["h"], case["draft"], 576, 512
    prefix = case["prefix"]
    tokens = bs * draft
    pool = max(1024, 2 * sum(prefix) + tokens)
    kv_dtype = torch.float8_e4m3fn if case["kv"] == "fp8" else torch.bfloat16
    q = torch.randn(tokens, h, d, generator=g).bfloat16()
    k_ext = torch.randn(tokens, 1, d, generator=g).bfloat16()
    k_buf = torch.randn(pool, 1, d, generator=g).to(kv_dtype)
    lens = torch.tensor(prefix, dtype=torch.int32)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = torch.cumsum(lens, 0)
    kv_indices = torch.randperm(pool, generator=g)[: sum(prefix)].to(torch.int64)
    # the tree mask sglang builds for topk == 1: the whole prefix, then the causal chain of the drafts
    mask = torch.cat([torch.tril(torch.ones(draft, p + draft, dtype=torch.bool), diagonal=p).flatten()
                      for p in prefix])
    mask_indptr = torch.zeros(bs + 1, dtype=torch.int64)
    mask_indptr[1:] = torch.cumsum(torch.tensor([draft * (p + draft) for p in prefix]), 0)
    return {"q": q, "k_ext": k_ext, "v_ext": k_ext[..., :dv], "k_buf": k_buf, "v_buf": k_buf[..., :dv],
            "qo_indptr": torch.arange(0, tokens + 1, draft, dtype=torch.int32), "kv_indptr": kv_indptr,
            "kv_indices": kv_indices, "mask": mask, "mask_indptr": mask_indptr, "draft": draft,
            "sm_scale": 1.0 / math.sqrt(192), "k_scale": case.get("k_scale", 1.0),
            "v_scale": case.get("v_scale", 1.0), "kv_dtype": kv_dtype}


def _args(x: dict, out) -> tuple:
    return (x["q"], x["k_ext"].contiguous(), x["v_ext"].contiguous(), out, x["k_buf"], x["v_buf"], x["qo_indptr"],
            x["kv_indptr"], x["kv_indices"], x["mask"], True, x["mask_indptr"], x["draft"], x["k_scale"],
            x["v_scale"], x["sm_scale"])


def reference(x: dict, drop_tail: float = 0.0) -> tuple[Any, Any]:
    """fp64 attention of every draft token over its prefix and the drafts up to itself, with the kernels' one
    deterministic rounding applied (the prefix scores use q cast to the KV dtype, as extend_attention_fwd's
    `q.to(k.dtype)`); and per (token, head) row the bound of error_bound. drop_tail: leave out that fraction
    of every prefix's last tokens (a defect the checks must see)."""
    import torch

    draft, bs = x["draft"], x["qo_indptr"].numel() - 1
    q64 = x["q"].double()
    q_kv = x["q"].to(x["kv_dtype"]).double()
    outs, bounds = [], []
    fp8 = x["kv_dtype"] != torch.bfloat16
    for b in range(bs):
        lo, hi = int(x["kv_indptr"][b]), int(x["kv_indptr"][b + 1])
        hi_used = hi - int((hi - lo) * drop_tail)
        idx = x["kv_indices"][lo:hi_used]
        kp, vp = x["k_buf"][idx, 0].double(), x["v_buf"][idx, 0].double() * x["v_scale"]
        ke, ve = x["k_ext"][b * draft:(b + 1) * draft, 0].double(), x["v_ext"][b * draft:(b + 1) * draft, 0].double()
        rows = slice(b * draft, (b + 1) * draft)
        s_p = torch.einsum("lhd,nd->lhn", q_kv[rows], kp) * x["sm_scale"] * x["k_scale"]
        s_e = torch.einsum("lhd,nd->lhn", q64[rows], ke) * x["sm_scale"]
        causal = torch.tril(torch.ones(draft, draft, dtype=torch.bool))
        s_e = s_e.masked_fill(~causal[:, None, :], float("-inf"))
        s = torch.cat([s_p, s_e], -1)
        p = torch.softmax(s, -1)
        v_all = torch.cat([vp, ve], 0)
        outs.append(torch.einsum("lhn,nd->lhd", p, v_all))
        # per-row ingredients of the bound
        abs_qk = torch.cat([torch.einsum("lhd,nd->lhn", q_kv[rows].abs(), kp.abs()) * x["sm_scale"] * x["k_scale"],
                            torch.einsum("lhd,nd->lhn", q64[rows].abs(), ke.abs()) * x["sm_scale"]], -1)
        visible = torch.isfinite(s)
        vmax = v_all.abs().amax(-1)  # per key
        vmax_row = torch.where(visible, vmax[None, None, :], torch.zeros(())).amax(-1)
        e_qk = 576 * U_FP32 * torch.where(visible, abs_qk, torch.zeros(())).amax(-1)
        denom = torch.exp(s - s.amax(-1, keepdim=True)).sum(-1)  # sum of p relative to the row's max
        n_visible = visible.sum(-1).double()
        u_p = U_FP8 if fp8 else U_BF16
        tiny = FP8_ABS * n_visible / denom if fp8 else torch.zeros(())
        bounds.append(((u_p + 2 * e_qk) * vmax_row + tiny * vmax_row, vmax_row))
    out = torch.cat(outs)
    return out, bounds


def error_bound(bounds: list, ref, partials_bf16: bool):
    """Per element, how far a kernel's bf16 output may be from the fp64 reference:
    - the probabilities are cast to V's dtype before the PV product: a relative error u_p per weight, so at
      most u_p x max|v| on the weighted mean (u_p = 2^-8 bf16, 2^-4 fp8; fp8 also flushes weights below 2^-10
      of their tile's maximum: FP8_ABS x keys / sum of weights, times max|v|);
    - the scores are fp32 sums of 576 exact products: relative error <= 576 x 2^-24 of sum |q_i k_i| x scale,
      which moves every weight by that factor (twice: numerator and denominator);
    - partial results stored as bf16 (upstream's verify_mla): u_bf16 x max|v| more;
    - the output's own rounding to bf16: u_bf16 x |out| (with 1 ulp of slack for the merge's fp32 exp/log)."""
    import torch

    per_row = torch.cat([b for b, _ in bounds])  # [tokens, heads]
    vmax = torch.cat([v for _, v in bounds])
    extra = (U_BF16 * vmax) if partials_bf16 else 0.0
    return (per_row + extra)[..., None] + U_BF16 * ref.abs() * (1 + U_BF16) + 4 * U_FP32 * vmax[..., None]


def kernel_cases(cases: list[dict] | None = None) -> dict:
    """Every case through the line's verify entry and extend_attention_fwd (TRITON_INTERPRET=1)."""
    import torch

    from support.triton_interp import fix_bf16_dot

    fix_bf16_dot()
    extend = _first_module(EXTEND_MODULES)
    vmod = verify_module()
    out: dict[str, Any] = {"verify_module": vmod.__name__ if vmod else None, "cases": []}
    for case in cases or CASES:
        x = make_inputs(case)
        ref, bounds = reference(x)
        ext = torch.zeros(ref.shape, dtype=torch.bfloat16)
        extend.extend_attention_fwd(*_args(x, ext))
        row = {"case": case, "ran": False}
        partials_bf16 = bool(vmod) and vmod.__name__.endswith("verify_mla")
        bound_ext = error_bound(bounds, ref, partials_bf16=False)
        row["extend_vs_ref"] = _ratio(ext.double() - ref, bound_ext)
        defect, _ = reference(x, drop_tail=0.25)
        row["defect_vs_ref"] = _ratio(defect - ref, bound_ext)  # a kernel that skipped 1/4 of the prefix
        if vmod is not None:
            _simulate_arch(vmod, case["arch"])
            mine = torch.zeros(ref.shape, dtype=torch.bfloat16)
            with _split_rule(vmod, case.get("split_rule")):
                row["ran"] = bool(vmod.verify_shared_kv_fwd(*_args(x, mine), max_bs=case["bs"] + 2))
            bound = error_bound(bounds, ref, partials_bf16)
            row["verify_vs_ref"] = _ratio(mine.double() - ref, bound)
            row["verify_vs_extend"] = _ratio(mine.double() - ext.double(), bound + bound_ext)
            row["max_abs_diff_vs_extend"] = float((mine.double() - ext.double()).abs().max())
        out["cases"].append(row)
    return out


@contextlib.contextmanager
def _split_rule(vmod, rule: tuple[int, int] | None):
    """0.5.14's split rule (SHORT_SPLITS, LONG_CHUNK) replaced for one call; nothing where the line has none."""
    if rule is None or not hasattr(vmod, "SHORT_SPLITS"):
        yield
        return
    saved = vmod.SHORT_SPLITS, vmod.LONG_CHUNK
    vmod.SHORT_SPLITS, vmod.LONG_CHUNK = rule
    try:
        yield
    finally:
        vmod.SHORT_SPLITS, vmod.LONG_CHUNK = saved


_SPLIT_COUNT = None  # the line's split_count, set by split_counts (a global: the probe kernel calls it by name)


def split_counts() -> dict:
    """How many splits the line's kernel gives one sequence's prefix (its in-kernel `split_count`, run by a probe
    kernel under Triton's interpreter), per simulated GPU, batch size and prefix length, with the grid's
    max_splits; {"rule": None} where the line has no such rule (0.5.23: upstream's verify_mla)."""
    global _SPLIT_COUNT
    import torch
    import triton
    import triton.language as tl

    vmod = verify_module()
    if vmod is None or not hasattr(vmod, "split_count"):
        return {"rule": None}
    _SPLIT_COUNT = vmod.split_count

    @triton.jit
    def probe(P, OUT, max_splits, MIN_CHUNK: tl.constexpr, SHORT: tl.constexpr, LONG: tl.constexpr):
        i = tl.program_id(0)
        tl.store(OUT + i, _SPLIT_COUNT(tl.load(P + i), max_splits, MIN_CHUNK, SHORT, LONG))

    rows = []
    for arch, (cap, sms) in ARCHS.items():
        plan = vmod.plan_launch(8, 1, 576, 512, 3, cap, v_is_k=True)
        c = plan.constexprs
        for bs in (1, 4):
            ms = vmod.max_splits(bs, plan.head_blocks, sms)
            prefixes = torch.tensor(SPLIT_PREFIXES, dtype=torch.int32)
            got = torch.zeros_like(prefixes)
            probe[(len(SPLIT_PREFIXES),)](prefixes, got, ms, MIN_CHUNK=c["MIN_CHUNK"], SHORT=c["SHORT"],
                                          LONG=c["LONG"])
            rows += [{"arch": arch, "bs": bs, "prefix": p, "max_splits": ms, "min_chunk": c["MIN_CHUNK"],
                      "splits": int(n)} for p, n in zip(SPLIT_PREFIXES, got.tolist(), strict=True)]
    return {"rule": {"MAX_SPLITS": vmod.MAX_SPLITS, "SHORT_SPLITS": vmod.SHORT_SPLITS, "LONG_CHUNK": vmod.LONG_CHUNK},
            "rows": rows}


def _ratio(err, bound) -> float:
    """max over elements of |err| / bound: <= 1 is within the bound."""
    return float((err.abs() / bound).max())


def gate_cases() -> dict:
    """The line's target-verify gate on simulated GPUs: (capability, SGLANG_ENABLE_SPLITKV_VERIFY, topk, MLA)."""
    from support.cuda_sim import simulate_cuda

    simulate_cuda((9, 0), device_count=1)
    backend = importlib.import_module(BACKEND)
    rows = []
    for cap in ((9, 0), (12, 0), (12, 1), (10, 0), (8, 9)):
        for env, topk, mla in (("1", 1, True), ("0", 1, True), ("1", 4, True), ("1", 1, False)):
            simulate_cuda(cap, device_count=1)
            os.environ["SGLANG_ENABLE_SPLITKV_VERIFY"] = env
            hf = SimpleNamespace(architectures=["DeepseekV3ForCausalLM"], model_type="deepseek_v3")
            if hasattr(backend, "_should_use_verify_shared_kv"):  # 0.5.23: the backend's one gate
                on = backend._should_use_verify_shared_kv(SimpleNamespace(hf_config=hf), topk, mla, False)
            elif hasattr(backend, "_should_use_cuda_verify_shared_kv"):  # 0.5.14 with P8
                on = backend._should_use_cuda_verify_shared_kv(topk, mla)
            else:
                on = False  # 0.5.14 before P8: only gfx95 (ROCm) has a split-KV verify
            rows.append({"capability": list(cap), "env": env, "topk": topk, "mla": mla, "on": bool(on)})
    os.environ.pop("SGLANG_ENABLE_SPLITKV_VERIFY", None)
    return {"rows": rows}


class _FakeMLAPool:
    """What forward_extend asks of MLATokenToKVPool: one latent row of 576 per token, values = its first 512."""

    def __init__(self, k_buf):
        self.k_buf = k_buf

    def get_key_buffer(self, layer_id):
        return self.k_buf

    def get_value_buffer(self, layer_id):
        return self.k_buf[..., :512]

    def set_kv_buffer(self, layer, loc, cache_k, cache_v, *scales):
        self.k_buf[loc.loc if hasattr(loc, "loc") else loc] = cache_k.to(self.k_buf.dtype)


def dispatch_case() -> dict:
    """0.5.14: TritonAttnBackend.forward_extend in TARGET_VERIFY mode, an MLA layer, on a simulated SM120, with
    the backend's gate as __init__ computes it; which kernels ran and how the output compares."""
    import torch

    from support.cuda_sim import simulate_cuda
    from support.triton_interp import fix_bf16_dot

    fix_bf16_dot()
    simulate_cuda((12, 0), device_count=1)
    if _first_module(EXTEND_MODULES[:1]) is None:  # 0.5.23 (kernels moved): the dispatch is upstream's own
        return {"applicable": False}
    tb = importlib.import_module(BACKEND)
    from sglang.srt.layers.radix_attention import AttentionType
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    extend = importlib.import_module(EXTEND_MODULES[0])
    vmod = verify_module()
    case = {"arch": "sm120", "bs": 2, "h": 8, "draft": 3, "prefix": [37, 300], "kv": "bf16"}
    x = make_inputs(case, seed=1)
    if vmod is not None:
        _simulate_arch(vmod, "sm120")
    ran: list[str] = []

    def spy(name, fn):
        def call(*a, **k):
            ran.append(name)
            return fn(*a, **k)
        return call

    backend = tb.TritonAttnBackend.__new__(tb.TritonAttnBackend)
    gate = getattr(tb, "_should_use_cuda_verify_shared_kv", None)
    backend.use_verify_shared_kv = bool(gate(1, True)) if gate else False
    backend.use_verify_splitkv = False
    backend.use_mla = True
    backend.enable_deterministic = False
    backend.allow_bidirectional_attention_in_extend = False
    backend.extend_attention_fwd = spy("extend_attention_fwd", extend.extend_attention_fwd)
    if vmod is not None:
        backend.verify_shared_kv_fwd = spy("verify_shared_kv_fwd", vmod.verify_shared_kv_fwd)
    # the draft tokens' rows in the pool: after the prefixes, written by forward_extend (save_kv_cache)
    pool = _FakeMLAPool(x["k_buf"].clone())
    backend.token_to_kv_pool = pool
    backend.req_to_token_pool = SimpleNamespace(size=4)
    backend.forward_metadata = tb.ForwardMetadata(
        attn_logits=None, attn_lse=None, max_extend_len=x["draft"], num_kv_splits=None, kv_indptr=x["kv_indptr"],
        kv_indices=x["kv_indices"], qo_indptr=x["qo_indptr"], custom_mask=x["mask"], mask_indptr=x["mask_indptr"],
        window_kv_indptr=None, window_kv_indices=None, window_num_kv_splits=None, window_kv_offsets=None)
    layer = SimpleNamespace(tp_q_head_num=8, qk_head_dim=576, v_head_dim=512, layer_id=0, k_scale=None,
                            v_scale=None, scaling=x["sm_scale"], logit_capping_method="tanh", logit_cap=0.0,
                            is_cross_attention=False, attn_type=AttentionType.DECODER, sliding_window_size=None,
                            xai_temperature_len=-1)
    tokens = x["q"].shape[0]
    free = sorted(set(range(pool.k_buf.shape[0])) - set(x["kv_indices"].tolist()))[:tokens]
    batch = SimpleNamespace(forward_mode=ForwardMode.TARGET_VERIFY, out_cache_loc=torch.tensor(free))
    o = backend.forward_extend(x["q"].view(tokens, -1), x["k_ext"], x["v_ext"], layer, batch)
    ref = torch.zeros(tokens, 8, 512, dtype=torch.bfloat16)
    extend.extend_attention_fwd(*_args({**x, "k_buf": pool.k_buf, "v_buf": pool.k_buf[..., :512]}, ref))
    got = o.view(tokens, 8, 512).double()
    rref, bounds = reference(x)
    bound = error_bound(bounds, rref, partials_bf16=False)
    return {"applicable": True, "gate": backend.use_verify_shared_kv, "ran": ran,
            "vs_extend": _ratio(got - ref.double(), 2 * bound)}


# ---- compiling the real launch for sm_90a / sm_120a -----------------------------------------------------

_TRITON_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "int32": "i32", "int64": "i64",
                  "float8_e4m3fn": "fp8e4nv"}


class _Recorder:
    """Stands in for a @triton.jit kernel: `kernel[grid](*args, **kwargs)` records the call, launches nothing."""

    def __init__(self, fn, calls: list):
        self.fn, self.calls = fn, calls

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.calls.append((self.fn, args, kwargs))
        return launch


def _signature(fn, args: tuple, kwargs: dict) -> tuple[dict, dict, dict]:
    options = {k: kwargs[k] for k in ("num_warps", "num_stages") if k in kwargs}
    constexprs = {k: v for k, v in kwargs.items() if k not in options}
    sig: dict[str, str] = {}
    positional = iter(args)
    for p in fn.params:
        if p.is_constexpr:
            sig[p.name] = "constexpr"
            continue
        v = next(positional)
        if hasattr(v, "dtype") and hasattr(v, "data_ptr"):
            sig[p.name] = "*" + _TRITON_DTYPES[str(v.dtype).removeprefix("torch.")]
        elif isinstance(v, float):
            sig[p.name] = "fp32"
        else:
            sig[p.name] = "i32"
    return sig, constexprs, options


def _resources(cubin: bytes) -> dict:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        text = subprocess.run([tool, "-res-usage", f.name], capture_output=True, text=True, check=True).stdout
    fields = dict(tok.split(":", 1) for line in text.splitlines() if "REG:" in line for tok in line.split()
                  if ":" in tok and tok.split(":", 1)[1].isdigit())
    return {"registers": int(fields["REG"]), "stack": int(fields["STACK"])}


def compile_cases() -> dict:
    """The kimi61 / Kimi-K2.x TP8 launch (8 heads, 3 drafts, 576/512) the line makes on each architecture, for
    bf16 and fp8 KV, compiled for the real target; the stage-1 (prefix) kernel is the heavy one."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    vmod = verify_module()
    if vmod is None:
        return {"verify_module": None, "rows": []}
    rows = []
    for arch, (cap, _sms) in ARCHS.items():
        for kv in ("bf16", "fp8"):
            calls: list = []
            kernels = {n: getattr(vmod, n) for n in dir(vmod) if isinstance(getattr(vmod, n), triton.JITFunction)}
            try:
                for name, fn in kernels.items():
                    setattr(vmod, name, _Recorder(fn, calls))
                _simulate_arch(vmod, arch)
                x = make_inputs({"bs": 1, "h": 8, "draft": 3, "prefix": [64], "kv": kv})
                import torch

                vmod.verify_shared_kv_fwd(*_args(x, torch.zeros(3, 8, 512, dtype=torch.bfloat16)), max_bs=1)
            finally:
                for name, fn in kernels.items():
                    setattr(vmod, name, fn)
            target = cap[0] * 10 + cap[1]
            for fn, args, kwargs in calls:
                sig, constexprs, options = _signature(fn, args, kwargs)
                compiled = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                                          target=GPUTarget("cuda", target, 32), options=options)
                rows.append({"arch": arch, "kv": kv, "kernel": fn.__name__, "shared": compiled.metadata.shared,
                             "shared_limit": SHARED_LIMIT[target], **_resources(compiled.asm["cubin"]),
                             "options": options,
                             "tile": {k: v for k, v in constexprs.items() if k.startswith(("BLOCK", "ROWS"))}})
    return {"verify_module": vmod.__name__, "rows": rows}
