"""benchmark/<name>.toml -> a validated BenchConfig for `bench eagle3`.

Every error names the file and the key at fault. Unknown keys are errors (a typo must not silently fall back
to a default). Paths in the config (the prompt file) are relative to the config file's directory.

    name = "lab-synthetic"
    [model]     target, draft, tokenizer ("target" | "none" | a path), target_layers
    [server]    tp, launcher, host, port, args, env, startup_timeout_s, teardown_grace_s, record_step_time
    [speculative] args                      (added to every arm with speculative = true, with the draft path)
    [arms.<name>] speculative, draft, args, env   (at least two arms; one baseline, one speculative; draft: the
                arm's own draft model instead of [model] draft, for drafts side by side)
    [workload]  api, prompts, prompt_template, output_len, concurrency, rounds, repeats, warmup_output_len,
                stream, token_range, contexts, prompt_seed, left_out
                api: "completions" (streamed /v1/completions, text prompts), "chat" (streamed
                /v1/chat/completions, one user message per prompt, the server's chat template) or "generate"
                (SGLang's native /generate; input_ids with tokenizer = "none"). Default: "completions" when the
                model has a tokenizer, else "generate". The OpenAI APIs always stream; `stream` is for /generate.
                contexts (prompt lengths in tokens) turns on grid mode: every (context, concurrency) cell is measured
                on generated token-id prompts (bench/eagle3/prompts.py, seeded by prompt_seed); no prompt file then.
                left_out (grid mode) = [{ context = <int>, concurrency = <int>, why = "<text>" }, ...]: cells not
                measured (no request sent), each with its reason in the receipt (workload.left_out) and the report;
                a left-out cell may have no [verdict] min_ratio bar and no [crosscheck] cell.
    [verdict]   baseline, speculative, min_ratio, fusion, min_fusion_gain, expect_accept_len,
                accept_len_tolerance, accept_len_arms, expect_break_even, first_burst_min_ratio (grid mode), metric
                grid mode: min_ratio = { <context> = { <concurrency> = <ratio> } }
    [profile]   steps, arms, timeout_s, contexts (grid mode: one window per listed context), prompt (grid
                mode: fresh or cell, PROFILE_PROMPTS)
                (optional torch-profiler window for draft/verify/decode GPU times)
    [crosscheck] cells, num_prompts, python, timeout_s   (grid mode: upstream's sglang.bench_serving per cell)

Here: the top level, [model], [server], [speculative], [profile] and [crosscheck], and BenchConfig. Each table is
read through config_section.Section (which makes the errors); [arms.*] is parsed in config_arms.py, [workload] and
the prompt file in config_workload.py, [verdict] in config_verdict.py.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...limits import MAX_TP, tp_problem
from ...tomlio import tomllib
from .config_arms import ArmSpec, check_arm, no_harness_flags, parse_arms
from .config_section import ConfigError, Section, read_text
from .config_verdict import VerdictSpec, parse_verdict
from .config_workload import WorkloadSpec, parse_workload

NAME_MAX = 100  # bench-eagle3_<name>_<UTC time>_runs.jsonl stays within a file system's 255 bytes
DEFAULT_LAUNCHER = ("python3", "-m", "sglang.launch_server")


@dataclass(frozen=True)
class ModelSpec:
    target: str
    draft: str | None
    tokenizer: str  # "target" (the target's own), "none" (--skip-tokenizer-init), or a path
    target_layers: int | None = None  # the target's layer count (num_hidden_layers), carried into the receipt


@dataclass(frozen=True)
class ServerSpec:
    tp: int
    launcher: tuple[str, ...]
    host: str
    port: int  # 0: pick a free port per launch
    args: tuple[str, ...]
    env: dict[str, str]
    startup_timeout_s: float
    teardown_grace_s: float
    record_step_time: bool


@dataclass(frozen=True)
class ProfileSpec:
    steps: int  # 0: no profiler window
    arms: tuple[str, ...]
    timeout_s: float
    contexts: tuple[int, ...] = ()  # grid mode: one window per listed context (prompt of that length)
    prompt: str = "fresh"  # grid mode: PROFILE_PROMPTS


# what [profile] prompt may name: the profiler window's request in grid mode
PROFILE_PROMPTS = {
    "fresh": "a prompt of its own, after every cell (its prefill runs in full)",
    "cell": "the last prompt of the context's warm window, right after that context's cells: its KV is still in "
            "the radix cache, so only its last token is prefilled again and the decode batches profiled attend "
            "over the same KV length (at 128k this saves a ~150 s prefill on one GPU)",
}


@dataclass(frozen=True)
class CrosscheckSpec:
    """Upstream's `python -m sglang.bench_serving` on the same server, per listed grid cell (grid mode)."""
    cells: tuple[tuple[int, int], ...]  # (context, concurrency)
    num_prompts: int
    python: str
    timeout_s: float


@dataclass(frozen=True)
class BenchConfig:
    name: str
    path: Path
    description: str
    model: ModelSpec
    server: ServerSpec
    speculative_args: tuple[str, ...]
    arms: dict[str, ArmSpec]
    workload: WorkloadSpec
    verdict: VerdictSpec
    profile: ProfileSpec
    raw: dict[str, Any] = field(repr=False)
    crosscheck: CrosscheckSpec | None = None

    @property
    def grid(self) -> bool:
        return self.workload.grid

    @property
    def sha256(self) -> str:
        """Hash of the parsed config (not the file bytes: comments and layout do not count)."""
        return hashlib.sha256(json.dumps(self.raw, sort_keys=True).encode()).hexdigest()

    @property
    def skip_tokenizer_init(self) -> bool:
        return self.model.tokenizer == "none"


def with_tp(cfg: BenchConfig, tp: int) -> BenchConfig:
    """The same benchmark at another tensor-parallel size (`bench eagle3 --tp N`). The TP size is part of the
    config's hash, so runs at different sizes never merge (`--from-runs`)."""
    if tp < 1:
        raise UserError(f"--tp: expected >= 1, got {tp}")
    if (why := tp_problem(tp)) is not None:
        raise UserError(f"--tp: {why} (limits.MAX_TP), got {tp}")
    if tp == cfg.server.tp:
        return cfg
    raw = copy.deepcopy(cfg.raw)
    raw.setdefault("server", {})["tp"] = tp
    return dataclasses.replace(cfg, server=dataclasses.replace(cfg.server, tp=tp), raw=raw)


def load_config(path: str | Path) -> BenchConfig:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: benchmark config not found")
    try:
        data = tomllib.loads(read_text(path))
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: not valid TOML: {e}") from None
    return parse_config(data, path)


def recorded_config(recorded: Any, base: Path) -> BenchConfig:
    """The config a receipt records (its `config`: name, path, sha256 and content, the parsed file), parsed as the
    run parsed it: the content at its recorded path (a relative one from `base`, the directory the run was started
    in: the repository root for the committed receipts), so relative paths in it (the prompt file) resolve as they
    did. Its hash is the recorded one, or the receipt is not what it says (ConfigError)."""
    where = f"receipt config {recorded.get('path') if isinstance(recorded, dict) else None!r}"
    if not (isinstance(recorded, dict) and isinstance(recorded.get("content"), dict)
            and isinstance(recorded.get("path"), str) and isinstance(recorded.get("sha256"), str)):
        raise ConfigError(f"{where}: expected an object with path, sha256 and content (the parsed config)")
    path = Path(recorded["path"])
    cfg = parse_config(copy.deepcopy(recorded["content"]), path if path.is_absolute() else base / path)
    if cfg.sha256 != recorded["sha256"]:
        raise ConfigError(f"{where}: its content hashes to {cfg.sha256[:12]}..., but the receipt records sha256 "
                          f"{recorded['sha256'][:12]}...: not the config it was measured with")
    return cfg


def parse_config(data: dict[str, Any], path: Path) -> BenchConfig:
    top = Section(path, "", data, {"name", "description", "model", "server", "speculative", "arms",
                                   "workload", "verdict", "profile", "crosscheck"})
    name = top.str_("name", path.stem)
    if name in (".", "..") or "/" in name or "\\" in name or not name.isprintable() or len(name) > NAME_MAX:
        raise top.error("name", f"{name!r}: it names the receipt files, so one file-name part: no / or \\, no "
                                f"control characters, at most {NAME_MAX} characters")
    description = top.str_("description", "") if top.has("description") else ""

    m = Section(path, "model", top.get("model", None, True), {"target", "draft", "tokenizer", "target_layers"})
    model = ModelSpec(target=m.str_("target", required=True), draft=m.str_("draft"),
                      tokenizer=m.str_("tokenizer", "target"),
                      target_layers=m.int_("target_layers") if m.has("target_layers") else None)

    s = Section(path, "server", top.get("server", None, True),
                {"tp", "launcher", "host", "port", "args", "env", "startup_timeout_s", "teardown_grace_s",
                 "record_step_time"})
    launcher = s.str_list("launcher", list(DEFAULT_LAUNCHER))
    if not launcher:
        raise s.error("launcher", "must name a program, e.g. [\"python3\", \"-m\", \"sglang.launch_server\"]")
    server = ServerSpec(
        tp=s.int_("tp", required=True, max_=MAX_TP), launcher=launcher, host=s.str_("host", "127.0.0.1"),
        port=s.int_("port", 30000, min_=0, max_=65535), args=s.str_list("args"), env=s.env("env"),
        startup_timeout_s=s.num("startup_timeout_s", 600.0, min_=1.0),
        teardown_grace_s=s.num("teardown_grace_s", 20.0, min_=0.0),
        record_step_time=s.bool_("record_step_time", True))
    no_harness_flags(s, "args", server.args)

    sp = Section(path, "speculative", top.get("speculative", {}, False), {"args"})
    speculative_args = sp.str_list("args")
    no_harness_flags(sp, "args", speculative_args)

    arms = parse_arms(top)
    if any(a.speculative for a in arms.values()):
        if not model.draft and any(a.speculative and not a.draft for a in arms.values()):
            raise m.error("draft", "missing: arms with speculative = true need the draft model path (here, or "
                                   "the arm's own draft)")
        if not speculative_args:
            raise sp.error("args", "missing: speculative arms need e.g. "
                                   "[\"--speculative-algorithm\", \"EAGLE3\", ...]")

    workload = parse_workload(path, top.get("workload", None, True), model.tokenizer)
    verdict = parse_verdict(top, arms, workload)
    _no_bar_on_left_out_cells(top, workload)

    p = Section(path, "profile", top.get("profile", {}, False),
                {"steps", "arms", "timeout_s", "contexts", "prompt"})
    steps = p.int_("steps", 0, min_=0)
    profile = ProfileSpec(steps=steps, arms=p.str_list("arms", [verdict.baseline, *verdict.speculative]),
                          timeout_s=p.num("timeout_s", 120.0, min_=1.0),
                          contexts=_profile_contexts(p, workload, steps), prompt=_profile_prompt(p, workload))
    for a in profile.arms:
        check_arm(p, "arms", a, arms, speculative=None)
    crosscheck = None
    if top.has("crosscheck"):
        crosscheck = _parse_crosscheck(Section(path, "crosscheck", data["crosscheck"],
                                               {"cells", "num_prompts", "python", "timeout_s"}),
                                       workload, model, server.launcher)

    return BenchConfig(name=name, path=path, description=description, model=model, server=server,
                       speculative_args=speculative_args, arms=arms, workload=workload, verdict=verdict,
                       profile=profile, raw=data, crosscheck=crosscheck)


def _no_bar_on_left_out_cells(top: Section, w: WorkloadSpec) -> None:
    """A [verdict] min_ratio bar on a cell [workload] left_out names would fail every run (the cell has no
    measurement: grid_verdict's ratio check of it finds no run): refused, naming both keys. Read from the raw
    table, whose keys config_verdict has checked already (canonical integers of the grid)."""
    raw = top.data["verdict"]
    bars = raw.get("min_ratio")
    if not w.left_out or not isinstance(bars, dict):
        return
    verdict = Section(top.path, "verdict", raw, set(raw))
    for i, cell in enumerate(w.left_out):
        per_c = bars.get(str(cell.context))
        if isinstance(per_c, dict) and str(cell.concurrency) in per_c:
            raise verdict.error(f"min_ratio.{cell.context}.{cell.concurrency}",
                                f"a bar on a cell [workload] left_out[{i}] leaves out (context {cell.context}, "
                                f"concurrency {cell.concurrency}: not measured, so the bar could never pass): "
                                "remove the bar or the left_out entry")


def _profile_contexts(p: Section, w: WorkloadSpec, steps: int) -> tuple[int, ...]:
    """[profile] contexts: a subset of workload.contexts (grid mode), one window each; default the smallest. A
    context whose every cell is left out (workload.left_out) has no profile window: it is not measured at all."""
    if not p.has("contexts"):
        measured = sorted({ctx for ctx, _ in w.measured_cells()})
        return (measured[0],) if w.grid and steps else ()
    if not w.grid:
        raise p.error("contexts", "grid mode only (needs workload.contexts)")
    got = p.data["contexts"]
    if (not isinstance(got, list) or not got
            or not all(isinstance(x, int) and not isinstance(x, bool) and x in w.contexts for x in got)
            or len(set(got)) != len(got)):
        raise p.error("contexts", f"expected distinct values of workload.contexts {list(w.contexts)}, got {got!r}")
    if not steps:
        raise p.error("contexts", "needs profile.steps > 0 (the window's length)")
    measured = {ctx for ctx, _ in w.measured_cells()}
    if unmeasured := sorted(set(got) - measured):
        raise p.error("contexts", f"context {unmeasured[0]}: workload.left_out leaves out every cell of it "
                                  "(not measured at all): no profile window there")
    return tuple(sorted(got))


def _profile_prompt(p: Section, w: WorkloadSpec) -> str:
    """[profile] prompt: PROFILE_PROMPTS (default fresh); grid mode only. "cell" needs the radix cache the server
    keeps by default (a server run with --disable-radix-cache prefills the prompt again: slower, still right)."""
    got = p.str_("prompt", "fresh")
    if got not in PROFILE_PROMPTS:
        raise p.error("prompt", f"expected one of {', '.join(repr(k) for k in PROFILE_PROMPTS)}, got {got!r}")
    if got != "fresh" and not w.grid:
        raise p.error("prompt", "grid mode only (needs workload.contexts)")
    return str(got)


def default_crosscheck_python(launcher: tuple[str, ...]) -> str:
    """The launcher's interpreter when it is [<python>, "-m", ...], else python3."""
    return launcher[0] if len(launcher) >= 2 and launcher[1] == "-m" else "python3"


def _parse_crosscheck(x: Section, w: WorkloadSpec, model: ModelSpec,
                      launcher: tuple[str, ...]) -> CrosscheckSpec:
    if not w.grid:
        raise x.error(None, "grid mode only (needs workload.contexts)")
    if model.tokenizer == "none":
        raise x.error(None, "sglang.bench_serving needs the model's tokenizer, but [model] tokenizer = \"none\"")
    raw = x.get("cells", None, True)
    cells: list[tuple[int, int]] = []
    if not isinstance(raw, list) or not raw:
        raise x.error("cells", f"expected a list of [context, concurrency] pairs, got {raw!r}")
    for cell in raw:
        if (not isinstance(cell, list) or len(cell) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) for n in cell)
                or cell[0] not in w.contexts or cell[1] not in w.concurrency):
            raise x.error("cells", f"{cell!r}: expected [context, concurrency] of the grid (contexts "
                                   f"{list(w.contexts)}, concurrency {list(w.concurrency)})")
        if tuple(cell) in cells:
            raise x.error("cells", f"{cell!r} is listed twice")
        if w.left_out_cell(cell[0], cell[1]) is not None:
            raise x.error("cells", f"{cell!r} is a cell workload.left_out leaves out (not measured): nothing to "
                                   "cross-check it against")
        cells.append((cell[0], cell[1]))
    return CrosscheckSpec(cells=tuple(cells), num_prompts=x.int_("num_prompts", 8),
                          python=x.str_("python", default_crosscheck_python(launcher)) or "python3",
                          timeout_s=x.num("timeout_s", 300.0, min_=1.0) or 300.0)


def select_arms(cfg: BenchConfig, names: str | None) -> list[str]:
    """--arms a,b -> arm names in config order; every name must exist."""
    if not names:
        return list(cfg.arms)
    wanted = [n.strip() for n in names.split(",") if n.strip()]
    if not wanted:
        raise UserError(f"--arms {names!r}: names no arm (config {cfg.path} has: {', '.join(cfg.arms)})")
    unknown = [n for n in wanted if n not in cfg.arms]
    if unknown:
        raise UserError(f"--arms: unknown arm {unknown[0]!r} (config {cfg.path} has: {', '.join(cfg.arms)})")
    return [n for n in cfg.arms if n in wanted]
