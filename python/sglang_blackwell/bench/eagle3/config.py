"""benchmark/<name>.toml -> a validated BenchConfig for `bench eagle3`.

Every error names the file and the key at fault. Unknown keys are errors (a typo must not silently fall back
to a default). Paths in the config (the prompt file) are relative to the config file's directory.

    name = "lab-synthetic"
    [model]     target, draft, tokenizer ("target" | "none" | a path), target_layers
    [server]    tp, launcher, host, port, args, env, startup_timeout_s, teardown_grace_s, record_step_time
    [speculative] args                      (added to every arm with speculative = true, with the draft path)
    [arms.<name>] speculative, args, env    (at least two arms; one baseline, one speculative)
    [workload]  api, prompts, prompt_template, output_len, concurrency, rounds, repeats, warmup_output_len,
                stream, token_range, contexts, prompt_seed
                api: "completions" (streamed /v1/completions, text prompts), "chat" (streamed
                /v1/chat/completions, one user message per prompt, the server's chat template) or "generate"
                (SGLang's native /generate; input_ids with tokenizer = "none"). Default: "completions" when the
                model has a tokenizer, else "generate". The OpenAI APIs always stream; `stream` is for /generate.
                contexts (prompt lengths in tokens) turns on grid mode: every (context, concurrency) cell is measured
                on generated token-id prompts (bench/eagle3/prompts.py, seeded by prompt_seed); no prompt file then.
    [verdict]   baseline, speculative, min_ratio, fusion, min_fusion_gain, expect_accept_len,
                accept_len_tolerance, expect_break_even, first_burst_min_ratio (grid mode)
                grid mode: min_ratio = { <context> = { <concurrency> = <ratio> } }
    [profile]   steps, arms, timeout_s, contexts (grid mode: one window per listed context)
                (optional torch-profiler window for draft/verify/decode GPU times)
    [crosscheck] cells, num_prompts, python, timeout_s   (grid mode: upstream's sglang.bench_serving per cell)
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import UserError
from ...tomlio import tomllib

APIS = ("completions", "chat", "generate")
NAME_MAX = 100  # bench-eagle3_<name>_<UTC time>_runs.jsonl stays within a file system's 255 bytes
DEFAULT_LAUNCHER = ("python3", "-m", "sglang.launch_server")
# flags the harness sets from [model] and [server]; a config that sets them too would contradict itself
HARNESS_FLAGS = ("--model-path", "--tp-size", "--tp", "--tensor-parallel-size", "--port", "--host",
                 "--speculative-draft-model-path", "--skip-tokenizer-init", "--tokenizer-path")


class ConfigError(UserError):
    """A bad benchmark config: the message names the file and the key, in one line (a key or value with a line
    break or another control character in it is shown escaped)."""

    def __init__(self, message: str):
        super().__init__(one_line(message))


def one_line(text: str) -> str:
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


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
class ArmSpec:
    name: str
    speculative: bool
    args: tuple[str, ...]
    env: dict[str, str]


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    input_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class WorkloadSpec:
    api: str  # one of APIS
    prompts_path: Path | None  # None in grid mode (the prompts are generated)
    prompts: tuple[Prompt, ...]
    output_len: int
    concurrency: tuple[int, ...]
    rounds: int  # each of the c clients sends `rounds` requests back to back
    repeats: int
    warmup_output_len: int
    stream: bool  # always true for the OpenAI APIs
    token_range: tuple[int, int] | None
    contexts: tuple[int, ...] = ()  # grid mode: prompt lengths in tokens, ascending; () = the prompt file
    prompt_seed: int = 0  # grid mode: the generated prompts' seed (bench/eagle3/prompts.py)

    @property
    def grid(self) -> bool:
        """Grid mode: every (context, concurrency) cell, generated prompts."""
        return bool(self.contexts)

    @property
    def api_family(self) -> str:
        """What the receipt's summary calls it: "openai" (completions, chat) or "generate"."""
        return "generate" if self.api == "generate" else "openai"


@dataclass(frozen=True)
class VerdictSpec:
    baseline: str
    speculative: tuple[str, ...]
    min_ratio: dict[int, float]  # concurrency -> min EAGLE-3/baseline tok/s (worst spec vs best baseline)
    fusion_on: str | None
    fusion_off: str | None
    min_fusion_gain: float | None  # 0.15: fusion-on verify (or round) >= 15% faster; None: report only
    expect_accept_len: float | None
    expect_break_even: float | None
    accept_len_tolerance: float | None = None  # set: |measured - expect_accept_len| <= it is a verdict check
    # grid mode: context -> concurrency -> min ratio (min_ratio is then empty)
    grid_min_ratio: dict[int, dict[int, float]] = field(default_factory=dict)
    first_burst_min_ratio: float | None = None  # grid mode: first-burst tok/s >= it x the same arm's warm tok/s


@dataclass(frozen=True)
class ProfileSpec:
    steps: int  # 0: no profiler window
    arms: tuple[str, ...]
    timeout_s: float
    contexts: tuple[int, ...] = ()  # grid mode: one window per listed context (prompt of that length)


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


class _Section:
    """One TOML table with typed getters that name `file: [section] key` on every error."""

    def __init__(self, path: Path, name: str, data: Any, allowed: set[str]):
        self.path, self.name = path, name
        if not isinstance(data, dict):
            raise self.error(None, f"must be a table, got {type(data).__name__}")
        self.data = data
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise self.error(unknown[0], f"unknown key (allowed: {', '.join(sorted(allowed))})")

    def where(self, key: str | None) -> str:
        sec = f"[{self.name}]" if self.name else "top level"
        return f"{self.path}: {sec}" + (f" {key}" if key else "")

    def error(self, key: str | None, msg: str) -> ConfigError:
        return ConfigError(f"{self.where(key)}: {msg}")

    def has(self, key: str) -> bool:
        return key in self.data

    def _get(self, key: str, default: Any, required: bool) -> Any:
        if key not in self.data:
            if required:
                raise self.error(key, "missing (required)")
            return default
        return self.data[key]

    def str_(self, key: str, default: str | None = None, *, required: bool = False) -> str | None:
        v = self._get(key, default, required)
        if v is not None and (not isinstance(v, str) or not v):
            raise self.error(key, f"expected a non-empty string, got {v!r}")
        return v

    def bool_(self, key: str, default: bool) -> bool:
        v = self._get(key, default, False)
        if not isinstance(v, bool):
            raise self.error(key, f"expected true or false, got {v!r}")
        return v

    def int_(self, key: str, default: int | None = None, *, required: bool = False, min_: int = 1,
             max_: int | None = None) -> int:
        v = self._get(key, default, required)
        if isinstance(v, bool) or not isinstance(v, int) or v < min_ or (max_ is not None and v > max_):
            want = f"from {min_} to {max_}" if max_ is not None else f">= {min_}"
            raise self.error(key, f"expected an integer {want}, got {v!r}")
        return v

    def num(self, key: str, default: float | None = None, *, required: bool = False,
            min_: float = 0.0) -> float | None:
        v = self._get(key, default, required)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < min_:
            raise self.error(key, f"expected a finite number >= {min_}, got {v!r}")
        return float(v)

    def str_list(self, key: str, default: list[str] | None = None, *,
                 required: bool = False) -> tuple[str, ...]:
        v = self._get(key, default if default is not None else [], required)
        if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
            raise self.error(key, f"expected a list of strings, got {v!r}")
        return tuple(v)

    def env(self, key: str) -> dict[str, str]:
        v = self._get(key, {}, False)
        if not isinstance(v, dict):
            raise self.error(key, f"expected a table of NAME = \"value\", got {v!r}")
        for k, x in v.items():
            if not isinstance(x, str):
                raise self.error(f"{key}.{k}", f"expected a string value (TOML: {k} = \"1\"), got {x!r}")
        return dict(v)


def with_tp(cfg: BenchConfig, tp: int) -> BenchConfig:
    """The same benchmark at another tensor-parallel size (`bench eagle3 --tp N`). The TP size is part of the
    config's hash, so runs at different sizes never merge (`--from-runs`)."""
    if tp < 1:
        raise UserError(f"--tp: expected >= 1, got {tp}")
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
    top = _Section(path, "", data, {"name", "description", "model", "server", "speculative", "arms",
                                    "workload", "verdict", "profile", "crosscheck"})
    name = top.str_("name", path.stem)
    if name in (".", "..") or "/" in name or "\\" in name or not name.isprintable() or len(name) > NAME_MAX:
        raise top.error("name", f"{name!r}: it names the receipt files, so one file-name part: no / or \\, no "
                                f"control characters, at most {NAME_MAX} characters")
    description = top.str_("description", "") if top.has("description") else ""

    m = _Section(path, "model", top._get("model", None, True), {"target", "draft", "tokenizer", "target_layers"})
    model = ModelSpec(target=m.str_("target", required=True), draft=m.str_("draft"),
                      tokenizer=m.str_("tokenizer", "target"),
                      target_layers=m.int_("target_layers") if m.has("target_layers") else None)

    s = _Section(path, "server", top._get("server", None, True),
                 {"tp", "launcher", "host", "port", "args", "env", "startup_timeout_s", "teardown_grace_s",
                  "record_step_time"})
    launcher = s.str_list("launcher", list(DEFAULT_LAUNCHER))
    if not launcher:
        raise s.error("launcher", "must name a program, e.g. [\"python3\", \"-m\", \"sglang.launch_server\"]")
    server = ServerSpec(
        tp=s.int_("tp", required=True), launcher=launcher, host=s.str_("host", "127.0.0.1"),
        port=s.int_("port", 30000, min_=0, max_=65535), args=s.str_list("args"), env=s.env("env"),
        startup_timeout_s=s.num("startup_timeout_s", 600.0, min_=1.0),
        teardown_grace_s=s.num("teardown_grace_s", 20.0, min_=0.0),
        record_step_time=s.bool_("record_step_time", True))
    _no_harness_flags(s, "args", server.args)

    sp = _Section(path, "speculative", top._get("speculative", {}, False), {"args"})
    speculative_args = sp.str_list("args")
    _no_harness_flags(sp, "args", speculative_args)

    arms_raw = top._get("arms", None, True)
    if not isinstance(arms_raw, dict) or len(arms_raw) < 2:
        raise top.error("arms", "needs at least two [arms.<name>] tables (a baseline and a speculative arm)")
    arms: dict[str, ArmSpec] = {}
    for arm_name, arm_data in arms_raw.items():
        a = _Section(path, f"arms.{arm_name}", arm_data, {"speculative", "args", "env"})
        arms[arm_name] = ArmSpec(arm_name, a.bool_("speculative", False), a.str_list("args"), a.env("env"))
        _no_harness_flags(a, "args", arms[arm_name].args)
        if "," in arm_name:
            raise a.error(None, "arm names must not contain ',' (--arms takes a comma-separated list)")
    if any(a.speculative for a in arms.values()):
        if not model.draft:
            raise m.error("draft", "missing: arms with speculative = true need the draft model path")
        if not speculative_args:
            raise sp.error("args", "missing: speculative arms need e.g. "
                                   "[\"--speculative-algorithm\", \"EAGLE3\", ...]")

    workload = _parse_workload(path, top._get("workload", None, True), model)

    v = _Section(path, "verdict", top._get("verdict", None, True),
                 {"baseline", "speculative", "min_ratio", "fusion", "min_fusion_gain", "expect_accept_len",
                  "accept_len_tolerance", "expect_break_even", "first_burst_min_ratio"})
    baseline = v.str_("baseline", required=True)
    _check_arm(v, "baseline", baseline, arms, speculative=False)
    spec_arms = v.str_list("speculative", [a.name for a in arms.values() if a.speculative])
    if not spec_arms:
        raise v.error("speculative", "needs at least one speculative arm to compare against the baseline")
    for a in spec_arms:
        _check_arm(v, "speculative", a, arms, speculative=True)
    grid_min_ratio = _parse_grid_min_ratio(v, workload) if workload.grid else {}
    min_ratio = {} if workload.grid else _parse_min_ratio(v, workload.concurrency)
    fusion = v.str_list("fusion")
    if fusion and len(fusion) != 2:
        raise v.error("fusion", f"expected [\"<fusion-on arm>\", \"<fusion-off arm>\"], got {list(fusion)}")
    for a in fusion:
        _check_arm(v, "fusion", a, arms, speculative=True)
    min_fusion_gain = v.num("min_fusion_gain", None, min_=-1.0)
    if min_fusion_gain is not None and not fusion:
        raise v.error("min_fusion_gain", "set without verdict.fusion = [on_arm, off_arm]")
    verdict = VerdictSpec(
        baseline=baseline, speculative=spec_arms, min_ratio=min_ratio,
        fusion_on=fusion[0] if fusion else None, fusion_off=fusion[1] if fusion else None,
        min_fusion_gain=min_fusion_gain,
        expect_accept_len=v.num("expect_accept_len", None, min_=1.0),
        expect_break_even=v.num("expect_break_even", None, min_=0.0),
        accept_len_tolerance=v.num("accept_len_tolerance", None, min_=0.0),
        grid_min_ratio=grid_min_ratio, first_burst_min_ratio=_first_burst_min_ratio(v, workload.grid))
    if verdict.accept_len_tolerance is not None and verdict.expect_accept_len is None:
        raise v.error("accept_len_tolerance", "needs expect_accept_len (the value it is a tolerance of)")

    p = _Section(path, "profile", top._get("profile", {}, False), {"steps", "arms", "timeout_s", "contexts"})
    steps = p.int_("steps", 0, min_=0)
    profile = ProfileSpec(steps=steps, arms=p.str_list("arms", [baseline, *spec_arms]),
                          timeout_s=p.num("timeout_s", 120.0, min_=1.0),
                          contexts=_profile_contexts(p, workload, steps))
    for a in profile.arms:
        _check_arm(p, "arms", a, arms, speculative=None)
    crosscheck = None
    if top.has("crosscheck"):
        crosscheck = _parse_crosscheck(_Section(path, "crosscheck", data["crosscheck"],
                                                {"cells", "num_prompts", "python", "timeout_s"}),
                                       workload, model, server.launcher)

    return BenchConfig(name=name, path=path, description=description, model=model, server=server,
                       speculative_args=speculative_args, arms=arms, workload=workload, verdict=verdict,
                       profile=profile, raw=data, crosscheck=crosscheck)


def _no_harness_flags(sec: _Section, key: str, args: tuple[str, ...]) -> None:
    for a in args:
        flag = a.split("=", 1)[0]
        if flag in HARNESS_FLAGS:
            raise sec.error(key, f"{flag} is set by the harness from [model] and [server]; remove it here")


def _check_arm(sec: _Section, key: str, arm: str, arms: dict[str, ArmSpec], *,
               speculative: bool | None) -> None:
    if arm not in arms:
        raise sec.error(key, f"names arm {arm!r}, which has no [arms.{arm}] table (arms: {', '.join(arms)})")
    if speculative is not None and arms[arm].speculative != speculative:
        want = "speculative = true" if speculative else "speculative = false"
        raise sec.error(key, f"arm {arm!r} must have {want}")


def _parse_min_ratio(v: _Section, concurrency: tuple[int, ...]) -> dict[int, float]:
    raw = v._get("min_ratio", None, True)
    if not isinstance(raw, dict) or not raw:
        raise v.error("min_ratio", "expected a table of <concurrency> = <ratio>, "
                                   "e.g. min_ratio = { 1 = 1.3 }")
    out: dict[int, float] = {}
    for k, r in raw.items():
        c = _int_key(v, f"min_ratio.{k}", k, "concurrency levels")
        if c not in concurrency:
            raise v.error(f"min_ratio.{k}",
                          f"concurrency {c} is not in workload.concurrency {list(concurrency)}")
        out[c] = _ratio(v, f"min_ratio.{k}", r)
    return out


def _ratio(v: _Section, key: str, r: Any) -> float:
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not math.isfinite(r) or r <= 0:
        raise v.error(key, f"expected a positive number, got {r!r}")
    return float(r)


def _int_key(sec: _Section, key: str, k: str, what: str) -> int:
    try:
        return int(k)
    except ValueError:
        raise sec.error(key, f"keys are {what} (integers)") from None


def _parse_grid_min_ratio(v: _Section, w: WorkloadSpec) -> dict[int, dict[int, float]]:
    """min_ratio = { <context> = { <concurrency> = <ratio> } }: every key one of the grid's."""
    raw = v._get("min_ratio", None, True)
    if not isinstance(raw, dict) or not raw:
        raise v.error("min_ratio", "grid mode (workload.contexts): expected a table of <context> = { <concurrency> "
                                   "= <ratio> }, e.g. min_ratio = { 256 = { 1 = 1.35 } }")
    out: dict[int, dict[int, float]] = {}
    for k, per_c in raw.items():
        ctx = _int_key(v, f"min_ratio.{k}", k, "context lengths")
        if ctx not in w.contexts:
            raise v.error(f"min_ratio.{k}", f"context {ctx} is not in workload.contexts {list(w.contexts)}")
        if not isinstance(per_c, dict) or not per_c:
            raise v.error(f"min_ratio.{k}", f"expected a table of <concurrency> = <ratio> (grid mode), "
                                            f"e.g. {k} = {{ 1 = 1.35 }}, got {per_c!r}")
        out[ctx] = {}
        for ck, r in per_c.items():
            key = f"min_ratio.{k}.{ck}"
            c = _int_key(v, key, ck, "concurrency levels")
            if c not in w.concurrency:
                raise v.error(key, f"concurrency {c} is not in workload.concurrency {list(w.concurrency)}")
            out[ctx][c] = _ratio(v, key, r)
    return out


def _first_burst_min_ratio(v: _Section, grid: bool) -> float | None:
    r = v.num("first_burst_min_ratio", None, min_=0.0)
    if r is None:
        return None
    if not grid:
        raise v.error("first_burst_min_ratio", "grid mode only (needs workload.contexts)")
    if not 0 < r <= 1:
        raise v.error("first_burst_min_ratio", f"expected a number in (0, 1], got {r!r}")
    return r


def _profile_contexts(p: _Section, w: WorkloadSpec, steps: int) -> tuple[int, ...]:
    """[profile] contexts: a subset of workload.contexts (grid mode), one window each; default the smallest."""
    if not p.has("contexts"):
        return (w.contexts[0],) if w.grid and steps else ()
    if not w.grid:
        raise p.error("contexts", "grid mode only (needs workload.contexts)")
    got = p.data["contexts"]
    if (not isinstance(got, list) or not got
            or not all(isinstance(x, int) and not isinstance(x, bool) and x in w.contexts for x in got)
            or len(set(got)) != len(got)):
        raise p.error("contexts", f"expected distinct values of workload.contexts {list(w.contexts)}, got {got!r}")
    if not steps:
        raise p.error("contexts", "needs profile.steps > 0 (the window's length)")
    return tuple(sorted(got))


def default_crosscheck_python(launcher: tuple[str, ...]) -> str:
    """The launcher's interpreter when it is [<python>, "-m", ...], else python3."""
    return launcher[0] if len(launcher) >= 2 and launcher[1] == "-m" else "python3"


def _parse_crosscheck(x: _Section, w: WorkloadSpec, model: ModelSpec,
                      launcher: tuple[str, ...]) -> CrosscheckSpec:
    if not w.grid:
        raise x.error(None, "grid mode only (needs workload.contexts)")
    if model.tokenizer == "none":
        raise x.error(None, "sglang.bench_serving needs the model's tokenizer, but [model] tokenizer = \"none\"")
    raw = x._get("cells", None, True)
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
        cells.append((cell[0], cell[1]))
    return CrosscheckSpec(cells=tuple(cells), num_prompts=x.int_("num_prompts", 8),
                          python=x.str_("python", default_crosscheck_python(launcher)) or "python3",
                          timeout_s=x.num("timeout_s", 300.0, min_=1.0) or 300.0)


def _parse_contexts(w: _Section) -> tuple[int, ...]:
    got = w._get("contexts", None, False)
    if got is None:
        return ()
    if (not isinstance(got, list) or not got
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in got)
            or len(set(got)) != len(got)):
        raise w.error("contexts", f"expected a non-empty list of distinct integers >= 1 (prompt lengths in "
                                  f"tokens), got {got!r}")
    return tuple(sorted(got))


def _parse_workload(path: Path, data: Any, model: ModelSpec) -> WorkloadSpec:
    w = _Section(path, "workload", data, {"api", "prompts", "prompt_template", "output_len", "concurrency",
                                          "rounds", "repeats", "warmup_output_len", "stream", "token_range",
                                          "contexts", "prompt_seed"})
    api = w.str_("api", "generate" if model.tokenizer == "none" else "completions")
    if api not in APIS:
        raise w.error("api", f"expected one of {', '.join(repr(a) for a in APIS)}, got {api!r}")
    if api != "generate" and model.tokenizer == "none":
        raise w.error("api", f"{api!r} needs the model's tokenizer, but [model] tokenizer = \"none\" "
                             "(--skip-tokenizer-init serves only /generate with input_ids): use api = \"generate\"")
    stream = w.bool_("stream", api != "generate")
    if api != "generate" and not stream:
        raise w.error("stream", f"api {api!r} is always streamed (TTFT, inter-token latency); "
                                "stream = false is for api = \"generate\"")
    conc = w._get("concurrency", None, True)
    if (not isinstance(conc, list) or not conc
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in conc)
            or len(set(conc)) != len(conc)):
        raise w.error("concurrency", f"expected a non-empty list of distinct integers >= 1, got {conc!r}")
    tr = w._get("token_range", None, False)
    token_range = None
    if tr is not None:
        if (not isinstance(tr, list) or len(tr) != 2 or not all(isinstance(x, int) for x in tr)
                or not 0 <= tr[0] < tr[1]):
            raise w.error("token_range", f"expected [lo, hi) with 0 <= lo < hi, got {tr!r}")
        token_range = (tr[0], tr[1])
    contexts = _parse_contexts(w)
    if contexts:
        return _grid_workload(w, api, tuple(conc), stream, token_range, contexts)
    if w.has("prompt_seed"):
        raise w.error("prompt_seed", "grid mode only (needs workload.contexts)")
    rel = w.str_("prompts", required=True)
    try:
        prompts_path = (path.parent / rel).resolve()
        found = prompts_path.is_file()
    except (OSError, ValueError) as e:  # a NUL byte, a name too long for the file system
        raise w.error("prompts", f"{rel!r} is not a usable path ({e})") from None
    if not found:
        raise w.error("prompts", f"prompt file {prompts_path} not found")
    prompts = load_prompts(prompts_path, where=w.where("prompts"), need_ids=model.tokenizer == "none",
                           token_range=token_range)
    template = w.str_("prompt_template")
    if api == "chat" and any(p.text is None for p in prompts):
        raise w.error("api", "\"chat\" sends text messages, but the prompt file has input_ids")
    if template is not None and api == "chat":
        raise w.error("prompt_template", "api = \"chat\" applies the model's chat template on the server; "
                                         "prompt_template is for \"completions\" and \"generate\"")
    if template is not None:
        if template.count("{prompt}") != 1:
            raise w.error("prompt_template", "must contain {prompt} exactly once")
        if any(p.text is None for p in prompts):
            raise w.error("prompt_template",
                          "applies to \"text\" prompts only; the prompt file has input_ids")
        prompts = tuple(Prompt(text=template.replace("{prompt}", p.text or "")) for p in prompts)
    return WorkloadSpec(
        api=api, prompts_path=prompts_path, prompts=prompts, output_len=w.int_("output_len", required=True, min_=2),
        concurrency=tuple(conc), rounds=w.int_("rounds", 2), repeats=w.int_("repeats", 3),
        warmup_output_len=w.int_("warmup_output_len", 16), stream=stream,
        token_range=token_range)


def _grid_workload(w: _Section, api: str, conc: tuple[int, ...], stream: bool,
                   token_range: tuple[int, int] | None, contexts: tuple[int, ...]) -> WorkloadSpec:
    """Grid mode: the prompts are made (token ids), not read."""
    for key in ("prompts", "prompt_template"):
        if w.has(key):
            raise w.error(key, "grid mode (workload.contexts) makes its own token-id prompts "
                               "(bench/eagle3/prompts.py): remove it")
    if api == "chat":
        raise w.error("api", "grid mode (workload.contexts) sends token-id prompts: use \"completions\" (the "
                             "OpenAI completions API takes a list of token ids) or \"generate\", not \"chat\"")
    return WorkloadSpec(
        api=api, prompts_path=None, prompts=(), output_len=w.int_("output_len", required=True, min_=2),
        concurrency=conc, rounds=w.int_("rounds", 2), repeats=w.int_("repeats", 3),
        warmup_output_len=w.int_("warmup_output_len", 16), stream=stream, token_range=token_range,
        contexts=contexts, prompt_seed=w.int_("prompt_seed", 0, min_=0))


def read_text(path: Path, where: str | None = None) -> str:
    """The UTF-8 text of a file the config names (or the config itself); ConfigError naming it otherwise."""
    at = f"{where}: {path}" if where else str(path)
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{at}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    except OSError as e:
        raise ConfigError(f"{at}: cannot read ({e.strerror or e})") from None


def load_prompts(path: Path, *, where: str, need_ids: bool,
                 token_range: tuple[int, int] | None) -> tuple[Prompt, ...]:
    """JSONL, one object a line with exactly one of "text" (a string) or "input_ids" (a list of ints)."""
    if not path.is_file():
        raise ConfigError(f"{where}: prompt file {path} not found")
    out: list[Prompt] = []
    for n, line in enumerate(read_text(path, where).splitlines(), 1):
        if not line.strip():
            continue
        at = f"{where}: {path}:{n}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{at}: not JSON: {e}") from None
        if not isinstance(obj, dict) or len({"text", "input_ids"} & set(obj)) != 1:
            raise ConfigError(f"{at}: expected an object with exactly one of \"text\" or \"input_ids\"")
        if "text" in obj:
            if need_ids:
                raise ConfigError(f"{at}: \"text\" prompt, but [model] tokenizer = \"none\" "
                                  "(--skip-tokenizer-init) needs \"input_ids\"")
            if not isinstance(obj["text"], str) or not obj["text"]:
                raise ConfigError(f"{at}: \"text\" must be a non-empty string")
            out.append(Prompt(text=obj["text"]))
        else:
            ids = obj["input_ids"]
            if (not isinstance(ids, list) or not ids
                    or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids)):
                raise ConfigError(f"{at}: \"input_ids\" must be a non-empty list of non-negative integers")
            if token_range is not None:
                bad = [i for i in ids if not token_range[0] <= i < token_range[1]]
                if bad:
                    raise ConfigError(f"{at}: token id {bad[0]} outside workload.token_range "
                                      f"[{token_range[0]}, {token_range[1]})")
            out.append(Prompt(input_ids=tuple(ids)))
    if not out:
        raise ConfigError(f"{where}: prompt file {path} holds no prompts")
    return tuple(out)


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
