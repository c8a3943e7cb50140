"""What the lab-line GPU suite (test/gpu/labline) assumes about sglang 0.5.14 and flashinfer 0.6.12, read from
the pinned releases themselves (the wheels `sglang-blackwell fetch` caches; sglang also with the 0.5.14 series
applied), so a wrong flag, log format, span name, kernel name or API signature fails here and not on the lab.
Nothing is imported from the upstream trees: the files are parsed (ast) or searched.
"""

from __future__ import annotations

import ast
import fnmatch
import re
import sys
from pathlib import Path

import pytest

TEST_ROOT = Path(__file__).resolve().parents[2]
LABLINE = TEST_ROOT / "gpu" / "labline"
for p in (TEST_ROOT, LABLINE):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

import labline_arms as arms  # noqa: E402
from labline_env import LabConfig  # noqa: E402

from sglang_blackwell.bench.eagle3 import sglang_api, trace_kernels  # noqa: E402
from sglang_blackwell.patchset.bases import get_base, series_for  # noqa: E402
from sglang_blackwell.qualify import gpu_suite_checks as checks  # noqa: E402
from support.trees import TreeFactory  # noqa: E402

pytestmark = pytest.mark.slow
BASE = "0.5.14"


@pytest.fixture(scope="module")
def trees(tree_factory: TreeFactory) -> dict[str, Path]:
    f = tree_factory
    n = len(series_for(get_base(BASE), "sglang").patches)
    return {"sglang": f.tree(BASE, "sglang", 0) / "sglang", "sglang_patched": f.tree(BASE, "sglang", n) / "sglang",
            "flashinfer": f.tree(BASE, "flashinfer", 0) / "flashinfer"}


def parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def klass(tree: ast.Module, name: str) -> ast.ClassDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == name)


def func(tree: ast.AST, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == name)


def params(fn: ast.FunctionDef) -> set[str]:
    a = fn.args
    return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}


def server_args_fields(srt: Path) -> dict[str, str]:
    """ServerArgs field -> its annotation as source text."""
    cls = klass(parse(srt / "server_args.py"), "ServerArgs")
    return {st.target.id: ast.unparse(st.annotation) for st in cls.body
            if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)}


def cli_flags(srt: Path) -> set[str]:
    """The CLI flags ServerArgs derives: --field-name for every field not marked no_cli, plus its aliases."""
    cls = klass(parse(srt / "server_args.py"), "ServerArgs")
    flags = set()
    for st in cls.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        calls = [c for c in ast.walk(st.annotation) if isinstance(c, ast.Call) and getattr(c.func, "id", "") == "Arg"]
        kw = {k.arg: k.value for c in calls for k in c.keywords}
        if isinstance(kw.get("no_cli"), ast.Constant) and kw["no_cli"].value is True:
            continue
        flags.add("--" + st.target.id.replace("_", "-"))
        if isinstance(kw.get("aliases"), ast.List):
            flags.update(e.value for e in kw["aliases"].elts if isinstance(e, ast.Constant))
    return flags


def render_fstrings(tree: ast.AST, marker: str, values: dict[str, str]) -> list[str]:
    """Every f-string (implicitly concatenated) holding `marker`, with {expr} replaced by values[expr]."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and marker in "".join(
                v.value for v in node.values if isinstance(v, ast.Constant)):
            parts = [v.value if isinstance(v, ast.Constant) else values.get(ast.unparse(v.value), "7")
                     for v in node.values]
            out.append("".join(parts))
    return out


def test_every_flag_the_suite_passes_exists_with_its_value(trees):
    srt = trees["sglang"] / "srt"
    flags = cli_flags(srt)
    cfg = LabConfig(target=Path("/t"), draft=Path("/d"), out=Path("/o"), deadline_s=1, python="python3")
    used = set()
    for spec in arms.ARMS.values():
        used.update(a for a in arms.server_command(spec, cfg, 30000) if a.startswith("--"))
    missing = sorted(used - flags)
    assert not missing, f"not sglang {BASE} flags: {missing}"
    fields = server_args_fields(srt)
    assert "'disabled'" in fields["cuda_graph_backend_prefill"]
    assert "'trtllm'" in fields["flashinfer_allreduce_fusion_backend"]
    choices = next(n for n in parse(srt / "server_args.py").body if isinstance(n, ast.Assign)
                   and getattr(n.targets[0], "id", "") == "ATTENTION_BACKEND_CHOICES")
    assert "triton" in ast.literal_eval(choices.value)
    assert "EAGLE3" in fields["speculative_algorithm"]  # named in the help text of the field


def test_server_info_keys_the_suite_reads_are_server_args(trees):
    fields = server_args_fields(trees["sglang"] / "srt")
    for k in ("tp_size", "speculative_algorithm", "speculative_num_steps", "speculative_eagle_topk",
              "speculative_num_draft_tokens", "flashinfer_allreduce_fusion_backend", "disable_custom_all_reduce",
              "disable_radix_cache", "attention_backend", "cuda_graph_max_bs_decode", "enable_torch_symm_mem",
              "enforce_disable_flashinfer_allreduce_fusion", "max_running_requests"):
        assert k in fields, k
    src = (trees["sglang"] / "srt" / "entrypoints" / "http_server.py").read_text()
    assert '@app.get("/server_info")' in src and "**dataclasses.asdict(server_args)" in src


def test_workspace_log_line_format(trees):
    for key in ("sglang", "sglang_patched"):
        tree = parse(trees[key] / "srt" / "layers" / "flashinfer_comm_fusion.py")
        lines = render_fstrings(tree, "workspace initialized", {"backend_name": "trtllm"})
        assert len(lines) == 1, lines
        assert checks.WORKSPACE_LINE.search(lines[0]), lines[0]


def test_symm_mem_log_line_is_p6s(trees):
    def rendered(root: Path) -> list[str]:
        tree = parse(root / "srt" / "distributed" / "device_communicators" / "torch_symm_mem.py")
        out = []
        for c in ast.walk(tree):
            if isinstance(c, ast.Call) and getattr(c.func, "attr", "") == "info" and c.args:
                fmt = c.args[0]
                text = fmt.value if isinstance(fmt, ast.Constant) and isinstance(fmt.value, str) else None
                if text and text.startswith("TorchSymmMemCommunicator: ") and "one-shot" in text:
                    specs = re.findall(r"%([sd])", text)
                    out.append(text % tuple("no multicast" if k == "s" else 7 for k in specs))
        return out

    patched = rendered(trees["sglang_patched"])
    assert len(patched) == 1 and checks.SYMM_MEM_LINE.search(patched[0]), patched
    assert rendered(trees["sglang"]) == []  # upstream has no such line: it is the patch's
    src = (trees["sglang_patched"] / "srt" / "distributed" / "device_communicators" / "torch_symm_mem.py").read_text()
    assert "def kernel_for(self, nbytes: int) -> str:" in src and "self.use_multimem" in src
    assert "TORCH_SYMM_MEM_ONESHOT_MAX_SIZE = 256 * 1024" in (
        trees["sglang_patched"] / "srt" / "distributed" / "device_communicators" / "all_reduce_utils.py").read_text()


def test_step_span_names(trees):
    srt = trees["sglang"] / "srt"
    fn = func(parse(srt / "model_executor" / "model_runner.py"), "_build_step_span_name")
    assert 'f"step[{mode.name} bs={bs}]"' in ast.get_source_segment((srt / "model_executor" /
                                                                      "model_runner.py").read_text(), fn)
    mode = klass(parse(srt / "model_executor" / "forward_batch_info.py"), "ForwardMode")
    names = {t.id for st in mode.body if isinstance(st, ast.Assign) for t in st.targets if isinstance(t, ast.Name)}
    assert "TARGET_VERIFY" in names
    assert trace_kernels.is_verify_span("step[TARGET_VERIFY bs=1]")
    assert not trace_kernels.is_verify_span("step[DECODE bs=1]")


def test_start_profile_body_and_trace_file_name(trees, monkeypatch):
    srt = trees["sglang"] / "srt"
    sent = {}
    monkeypatch.setattr(sglang_api, "http_json", lambda url, body, timeout=0: sent.update(url=url, body=body))
    sglang_api.start_profile("http://h:1", "/out", 10, prefix="A")
    fields = {st.target.id for st in klass(parse(srt / "managers" / "io_struct.py"), "ProfileReqInput").body
              if isinstance(st, ast.AnnAssign)}
    assert sent["url"].endswith("/start_profile") and set(sent["body"]) <= fields, set(sent["body"]) - fields
    pm = (srt / "managers" / "scheduler_components" / "profiler_manager.py").read_text()
    for piece in ('stage_prefix = self.profile_prefix + "-"',
                  'filename_parts = [self.profile_id, f"TP-{self.ps.tp_rank}"]', '+ "-".join(filename_parts)',
                  '+ ".trace.json.gz"', "self.profiler_target_forward_ct = self.get_forward_ct() + num_steps"):
        assert piece in pm, piece
    name = "A-" + "-".join(["1764460800.123", "TP-0"]) + ".trace.json.gz"
    assert fnmatch.fnmatch(name, "A-*-TP-0.trace.json*") and not fnmatch.fnmatch(name.replace("TP-0", "TP-1"),
                                                                                  "A-*-TP-0.trace.json*")


def test_meta_info_fields(trees):
    tm = (trees["sglang"] / "srt" / "managers" / "tokenizer_manager.py").read_text()
    assert 'meta_info["spec_verify_ct"] = recv_obj.spec_verify_ct[i]' in tm
    assert "recv_obj.completion_tokens[i] / recv_obj.spec_verify_ct[i]" in tm
    assert "(logprob, token_id, None)" in tm  # skip_tokenizer_init: no text in the logprob triples


def test_fused_kernel_names_and_count_rule(trees):
    inc = trees["flashinfer"] / "data" / "include"
    kernels = {}
    for f in inc.rglob("*.cuh"):
        for m in re.finditer(r"__global__\s+void\s+(?:__launch_bounds__\([^)]*\)\s+)?(\w+)", f.read_text()):
            kernels.setdefault(m[1], set()).add(f.name)
    matched = {k: v for k, v in kernels.items() if trace_kernels.FUSED_ALLREDUCE_KERNEL.search(k)}
    assert matched == {"allreduce_fusion_kernel_oneshot_lamport": {"trtllm_allreduce_fusion.cuh"},
                       "allreduce_fusion_kernel_twoshot_sync": {"trtllm_allreduce_fusion.cuh"}}, matched
    assert "moereduce_allreduce_fusion_kernel_oneshot_lamport" in kernels  # exists, and is not counted
    comm = parse(trees["sglang"] / "srt" / "layers" / "communicator.py")
    src = ast.unparse(func(comm, "should_fuse_mlp_allreduce_with_next_layer"))
    assert "not self.is_last_layer" in src  # the last layer's MLP all-reduce stays unfused: 2L - 1 per forward


def test_workspace_sizes_follow_flashinfer(trees):
    src = (trees["flashinfer"] / "comm" / "trtllm_ar.py").read_text()
    for piece in ("buffer_size = tp_size * max_token_num * hidden_dim * 2",
                  "flag_size = tp_size * BarrierFlagCount * 4", "lamport_buffer_size = lamport_comm_size * 3",
                  f"BarrierFlagCount = {checks.BARRIER_FLAG_COUNT}",
                  "MAX_COMM_SIZE = 2147483647 & ~((1 << 21) - 1)"):
        assert piece in src, piece
    comm = (trees["sglang"] / "srt" / "layers" / "communicator.py").read_text()
    assert "FUSE_ALLREDUCE_MAX_BATCH_SIZE = 2048" in comm
    runner = (trees["sglang_patched"] / "srt" / "model_executor" / "runner" / "base_runner.py").read_text()
    assert "return min(max_bs * tokens_per_bs, FUSE_ALLREDUCE_MAX_BATCH_SIZE)" in runner  # P5
    assert arms.ARMS["A"].expected_workspace_tokens() == 16 * 3 and arms.ARMS["C"].expected_workspace_tokens() == 16
    assert arms.ARMS["B"].expected_workspace_tokens() is None


def test_apis_the_two_process_worker_calls(trees):
    ps = parse(trees["sglang"] / "srt" / "distributed" / "parallel_state.py")
    assert {"world_size", "rank", "distributed_init_method", "local_rank", "backend", "timeout"} <= params(
        func(ps, "init_distributed_environment"))
    assert "tensor_model_parallel_size" in params(func(ps, "initialize_model_parallel"))
    for name in ("set_custom_all_reduce", "set_torch_symm_mem_all_reduce", "get_tp_group"):
        func(ps, name)
    gc = ast.unparse(klass(ps, "GroupCoordinator"))
    assert "self.torch_symm_mem_comm = TorchSymmMemCommunicator(" in gc and "self.device_group = device_group" in gc
    fi = parse(trees["flashinfer"] / "comm" / "allreduce.py")
    assert {"backend", "world_size", "rank", "max_token_num", "hidden_dim", "dtype", "group"} <= params(
        func(fi, "create_allreduce_fusion_workspace"))
    assert "self.metadata = workspace_tuple[3]" in ast.unparse(klass(fi, "TRTLLMAllReduceFusionWorkspace"))


def test_tp2_bench_config_flags_exist_and_fusion_is_set_explicitly(trees):
    # benchmark/lab-kimi61-tp2.toml (issue 19): every flag its arms pass is a 0.5.14 flag, and 0.5.14 turns fusion
    # on by itself for DeepseekV3 at TP > 1 on SM90, so the fusion-off arms need the explicit off switch
    from sglang_blackwell.bench.eagle3.arm_run import server_command
    from sglang_blackwell.bench.eagle3.config import load_config

    srt = trees["sglang"] / "srt"
    cfg = load_config(TEST_ROOT.parent / "benchmark" / "lab-kimi61-tp2.toml")
    used = {a for arm in cfg.arms.values() for a in server_command(cfg, arm, 30000) if a.startswith("--")}
    assert not sorted(used - cli_flags(srt)), sorted(used - cli_flags(srt))
    src = (srt / "server_args.py").read_text()
    auto = src.index("Auto-enabling FlashInfer AllReduce Fusion")
    assert '"DeepseekV3ForCausalLM"' in src[auto - 3000:auto] and "self.tp_size > 1" in src[auto - 3000:auto]
    off = src.index("if self.enforce_disable_flashinfer_allreduce_fusion:", auto)
    assert "self.flashinfer_allreduce_fusion_backend = None" in src[off:off + 200]
