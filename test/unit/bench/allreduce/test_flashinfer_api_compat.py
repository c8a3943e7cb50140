"""The FlashInfer adapter of `bench allreduce` against the real API of every FlashInfer a base pins.

For each base's pinned flashinfer-python wheel (fetched and verified by the project's own cache), the
signatures of the workspace and all-reduce-fusion functions are read from the wheel's source (AST, nothing
is executed) and a stand-in `flashinfer.comm` is built whose functions bind their arguments exactly as the
real ones would. The adapter must pick the API the installed version has (0.6.10+: the unified API with a
`group`, the workspace in torch symmetric memory; before: the legacy cudaIpc one) and call it with arguments
the real signatures accept. Simulated: no kernel runs (CPU, no GPU); the argument binding is real.
"""

from __future__ import annotations

import ast
import inspect
import sys
import types
import zipfile

import pytest
from packaging.version import Version

torch = pytest.importorskip("torch")

from sglang_blackwell.bench.allreduce import backends as ab  # noqa: E402
from sglang_blackwell.patchset.bases import list_bases  # noqa: E402
from sglang_blackwell.patchset.fetch import fetch  # noqa: E402

pytestmark = pytest.mark.network
FUNCS = {
    "flashinfer/comm/allreduce.py": ("create_allreduce_fusion_workspace", "allreduce_fusion"),
    "flashinfer/comm/trtllm_ar.py": ("trtllm_create_ipc_workspace_for_all_reduce_fusion",
                                     "trtllm_destroy_ipc_workspace_for_all_reduce_fusion",
                                     "trtllm_allreduce_fusion"),
}
FLASHINFERS = sorted({(b.package("flashinfer").version, b.name) for b in list_bases()})


def top_level_signature(source: str, name: str) -> inspect.Signature | None:
    """The signature of module-level `def name` (nested defs of the same name, e.g. custom-op wrappers, are
    not the public API)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef) and node.name == name:
            a = node.args
            pos = a.posonlyargs + a.args
            first_default = len(pos) - len(a.defaults)
            params = [inspect.Parameter(p.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                        default=None if i >= first_default else inspect.Parameter.empty)
                      for i, p in enumerate(pos)]
            params += [inspect.Parameter(p.arg, inspect.Parameter.KEYWORD_ONLY,
                                         default=None if d is not None else inspect.Parameter.empty)
                       for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True)]
            return inspect.Signature(params)
    return None


class Workspace:
    destroyed = False

    def destroy(self) -> None:
        self.destroyed = True


def fake_comm(wheel) -> tuple[types.ModuleType, list]:
    calls: list = []
    comm = types.ModuleType("flashinfer.comm")
    comm.AllReduceFusionPattern = types.SimpleNamespace(kAllReduce=0, kARResidualRMSNorm=1)
    returns = {"create_allreduce_fusion_workspace": Workspace(),
               "trtllm_create_ipc_workspace_for_all_reduce_fusion": (["ipc"], "workspace-tensor")}
    with zipfile.ZipFile(wheel) as z:
        for path, names in FUNCS.items():
            src = z.read(path).decode()
            for name in names:
                sig = top_level_signature(src, name)
                if sig is None:
                    continue

                def fn(*args, _name=name, _sig=sig, **kwargs):
                    calls.append((_name, _sig.bind(*args, **kwargs).arguments))  # TypeError if not accepted
                    return returns.get(_name)

                fn.__signature__ = sig
                setattr(comm, name, fn)
    return comm, calls


@pytest.mark.parametrize("version,base", FLASHINFERS, ids=[f"flashinfer-{v}" for v, _ in FLASHINFERS])
def test_adapter_binds_to_real_signatures(version, base, monkeypatch):
    from sglang_blackwell.patchset.bases import get_base

    pkg = get_base(base).package("flashinfer")
    wheel = fetch(next(a for a in pkg.files if a.filename.endswith(".whl")))
    comm, calls = fake_comm(wheel)
    fi_pkg = types.ModuleType("flashinfer")
    fi_pkg.comm = comm
    monkeypatch.setitem(sys.modules, "flashinfer", fi_pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.comm", comm)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a, **k: None)
    monkeypatch.setattr(ab.dist, "barrier", lambda *a, **k: None)

    ctx = ab.RankContext(rank=1, world_size=2, device=torch.device("cpu"), group=types.SimpleNamespace(),
                         hidden=64, dtype=torch.bfloat16, tokens=[3], fi_max_tokens=2048)
    fi = ab.FlashInferTrtllm(ctx)
    expect = "unified" if Version(version) >= Version("0.6.10") else "legacy"
    assert fi.api == expect

    x, res, gamma = ctx.empty(3), ctx.empty(3), torch.ones(64, dtype=torch.bfloat16)
    out, res_out, norm_out = ctx.empty(3), ctx.empty(3), ctx.empty(3)
    fi.call(x, oneshot=True, fused=True, residual=res, residual_out=res_out, norm_out=norm_out, gamma=gamma)
    fi.call(x, oneshot=False, fused=False, out=out)
    fi.close()

    names = [c[0] for c in calls]
    if expect == "unified":
        assert names == ["create_allreduce_fusion_workspace", "allreduce_fusion", "allreduce_fusion"]
        create = calls[0][1]
        assert create["backend"] == "trtllm"  # never "auto"/"mnnvl", which may pick multicast
        assert create["group"] is ctx.group and create["max_token_num"] == 2048
        fused, ar = calls[1][1], calls[2][1]
        assert fused["pattern"] == 1 and fused["residual_in"] is res and fused["norm_out"] is norm_out
        assert ar["pattern"] == 0 and ar["output"] is out
        assert fi.workspace.destroyed
    else:
        assert names == ["trtllm_create_ipc_workspace_for_all_reduce_fusion", "trtllm_allreduce_fusion",
                         "trtllm_allreduce_fusion", "trtllm_destroy_ipc_workspace_for_all_reduce_fusion"]
        fused, ar = calls[1][1], calls[2][1]
        assert fused["pattern_code"] == 1 and fused["token_num"] == 3 and fused["world_rank"] == 1
        assert ar["pattern_code"] == 0 and ar["allreduce_out"] is out
    for c in (fused, ar):  # sglang's settings
        assert c["launch_with_pdl"] is True and c["fp32_acc"] is False
        assert c.get("trigger_completion_at_end", False) is False
    assert fused["use_oneshot"] is True and ar["use_oneshot"] is False


def class_method_signatures(source: str, cls: str) -> dict[str, inspect.Signature]:
    """Signatures of a class's methods (self dropped), read from source."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name == cls:
            mod = ast.Module(body=[n for n in node.body if isinstance(n, ast.FunctionDef)], type_ignores=[])
            text = ast.unparse(mod)
            return {n.name: _drop_self(top_level_signature(text, n.name)) for n in mod.body}
    return {}


def _drop_self(sig: inspect.Signature) -> inspect.Signature:
    return sig.replace(parameters=list(sig.parameters.values())[1:])


PCIE_IPC = "flashinfer/comm/pcie_ipc_ar.py"


@pytest.mark.parametrize("version,base", FLASHINFERS, ids=[f"flashinfer-{v}" for v, _ in FLASHINFERS])
def test_pcie_ipc_adapter_binds_to_real_signatures(version, base, monkeypatch):
    """Where the pinned FlashInfer has the PCIe-IPC all-reduce (0.7.0+), `bench allreduce` offers fi_pcie_ipc
    and fi_pcie_ipc_norm and calls PcieIpcAllReduceWorkspace the way its real methods accept; where it does
    not, both backends say so and stay out."""
    from sglang_blackwell.patchset.bases import get_base

    wheel = fetch(next(a for a in get_base(base).package("flashinfer").files if a.filename.endswith(".whl")))
    with zipfile.ZipFile(wheel) as z:
        src = z.read(PCIE_IPC).decode() if PCIE_IPC in z.namelist() else ""
    sigs = class_method_signatures(src, "PcieIpcAllReduceWorkspace")
    comm = types.ModuleType("flashinfer.comm")
    calls: list = []
    if sigs:
        class PcieIpcAllReduceWorkspace:
            def __init__(self, *a, **k):
                calls.append(("__init__", sigs["__init__"].bind(*a, **k).arguments))

            def prepare(self, *a, **k):
                args = sigs["prepare"].bind(*a, **k).arguments
                calls.append(("prepare", args))
                return {shape: "config" for shape in args["shapes"]}

            def all_reduce(self, *a, **k):
                args = sigs["all_reduce"].bind(*a, **k).arguments
                calls.append(("all_reduce", args))
                args["out"].copy_(args["inp"])
                return args["out"]

            def destroy(self, *a, **k):
                calls.append(("destroy", sigs["destroy"].bind(*a, **k).arguments))

        comm.PcieIpcAllReduceWorkspace = PcieIpcAllReduceWorkspace
    fi_pkg = types.ModuleType("flashinfer")
    fi_pkg.comm = comm
    monkeypatch.setitem(sys.modules, "flashinfer", fi_pkg)
    monkeypatch.setitem(sys.modules, "flashinfer.comm", comm)
    ctx = ab.RankContext(rank=0, world_size=8, device=torch.device("cpu"), group=types.SimpleNamespace(),
                         hidden=64, dtype=torch.bfloat16, tokens=[1, 3], fi_max_tokens=2048)
    ipc, ipc_norm = ab.make(["fi_pcie_ipc", "fi_pcie_ipc_norm"])
    has_it = Version(version) >= Version("0.7.0")
    assert bool(sigs) == has_it
    for b in (ipc, ipc_norm):
        ok, why = b.available(ctx)
        assert ok is has_it, (b.name, why)
    if not has_it:
        return
    for b in (ipc, ipc_norm):  # the norm falls back to torch ops: no flashinfer.norm in the stand-in
        b.setup(ctx)
    x = torch.full((3, 64), 2.0, dtype=torch.bfloat16)
    (y,) = ipc.run(x.clone(), ctx.empty(3), torch.ones(64, dtype=torch.bfloat16))
    assert torch.equal(y, x)
    ab.close_shared(ctx)
    names = [c[0] for c in calls]
    assert names == ["__init__", "prepare", "all_reduce", "destroy"]  # one workspace for both backends
    assert calls[0][1]["max_numel"] == 3 * 64 and calls[0][1]["group"] is ctx.group
    assert calls[1][1]["shapes"] == [(1, 64), (3, 64)]
