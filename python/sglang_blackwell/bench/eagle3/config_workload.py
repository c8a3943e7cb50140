"""A benchmark config's `[workload]` -> WorkloadSpec: the API, the concurrency levels, rounds and repeats, and the
prompts: read from the config's JSONL prompt file (load_prompts), or, in grid mode (`contexts`), generated per
(context, concurrency) cell by bench/eagle3/prompts.py; in grid mode `left_out` names cells not measured, each with
the reason the receipt records."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...limits import MAX_CELL_TOKENS, MAX_CONCURRENCY, MAX_CONTEXT_TOKENS, MAX_OUTPUT_TOKENS
from .config_section import ConfigError, Section, read_text, shown

APIS = ("completions", "chat", "generate")
MAX_ROUNDS = 10_000  # requests each client sends back to back at one level
MAX_REPEATS = 1_000  # launches per arm
MAX_TOKEN_ID = 2**31 - 1  # beyond every vocabulary


@dataclass(frozen=True)
class Prompt:
    text: str | None = None
    input_ids: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LeftOutCell:
    """A grid cell `[workload] left_out` names: never measured (no request sent), its reason in the receipt."""
    context: int
    concurrency: int
    why: str

    def facts(self) -> dict[str, Any]:
        """What the receipt's workload.left_out holds of it."""
        return {"context": self.context, "concurrency": self.concurrency, "why": self.why}


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
    left_out: tuple[LeftOutCell, ...] = ()  # grid mode: cells not measured, in the config's order

    @property
    def grid(self) -> bool:
        """Grid mode: every (context, concurrency) cell but the left-out ones, generated prompts."""
        return bool(self.contexts)

    def left_out_cell(self, context: int, concurrency: int) -> LeftOutCell | None:
        """The `left_out` entry of this cell; None: the cell is measured."""
        return next((x for x in self.left_out if (x.context, x.concurrency) == (context, concurrency)), None)

    def measured_cells(self) -> list[tuple[int, int]]:
        """(context, concurrency) of every cell measured, in the order the grid measures them."""
        return [(ctx, c) for ctx in self.contexts for c in self.concurrency if self.left_out_cell(ctx, c) is None]

    @property
    def api_family(self) -> str:
        """What the receipt's summary calls it: "openai" (completions, chat) or "generate"."""
        return "generate" if self.api == "generate" else "openai"


def _parse_contexts(w: Section) -> tuple[int, ...]:
    got = w.get("contexts", None, False)
    if got is None:
        return ()
    if (not isinstance(got, list) or not got
            or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= MAX_CONTEXT_TOKENS for c in got)
            or len(set(got)) != len(got)):
        raise w.error("contexts", f"expected a non-empty list of distinct integers from 1 to {MAX_CONTEXT_TOKENS} "
                                  f"(prompt lengths in tokens; limits.MAX_CONTEXT_TOKENS), got {shown(got)}")
    return tuple(sorted(got))


def parse_workload(path: Path, data: Any, tokenizer: str) -> WorkloadSpec:
    """The top level's `workload` table; `tokenizer` is [model] tokenizer ("none": token-id prompts only)."""
    w = Section(path, "workload", data, {"api", "prompts", "prompt_template", "output_len", "concurrency",
                                         "rounds", "repeats", "warmup_output_len", "stream", "token_range",
                                         "contexts", "prompt_seed", "left_out"})
    api = w.str_("api", "generate" if tokenizer == "none" else "completions")
    if api not in APIS:
        raise w.error("api", f"expected one of {', '.join(repr(a) for a in APIS)}, got {api!r}")
    if api != "generate" and tokenizer == "none":
        raise w.error("api", f"{api!r} needs the model's tokenizer, but [model] tokenizer = \"none\" "
                             "(--skip-tokenizer-init serves only /generate with input_ids): use api = \"generate\"")
    stream = w.bool_("stream", api != "generate")
    if api != "generate" and not stream:
        raise w.error("stream", f"api {api!r} is always streamed (TTFT, inter-token latency); "
                                "stream = false is for api = \"generate\"")
    conc = w.get("concurrency", None, True)
    if (not isinstance(conc, list) or not conc
            or not all(isinstance(c, int) and not isinstance(c, bool) and 1 <= c <= MAX_CONCURRENCY for c in conc)
            or len(set(conc)) != len(conc)):
        raise w.error("concurrency", f"expected a non-empty list of distinct integers from 1 to {MAX_CONCURRENCY} "
                                     f"(limits.MAX_CONCURRENCY), got {shown(conc)}")
    tr = w.get("token_range", None, False)
    token_range = None
    if tr is not None:
        if (not isinstance(tr, list) or len(tr) != 2 or not all(isinstance(x, int) for x in tr)
                or not 0 <= tr[0] < tr[1] <= MAX_TOKEN_ID + 1):
            raise w.error("token_range", f"expected [lo, hi) with 0 <= lo < hi <= {MAX_TOKEN_ID + 1}, got {shown(tr)}")
        token_range = (tr[0], tr[1])
    contexts = _parse_contexts(w)
    if contexts:
        return _grid_workload(w, api, tuple(conc), stream, token_range, contexts)
    for key in ("prompt_seed", "left_out"):
        if w.has(key):
            raise w.error(key, "grid mode only (needs workload.contexts)")
    rel = w.str_("prompts", required=True)
    try:
        prompts_path = (path.parent / rel).resolve()
        found = prompts_path.is_file()
    except (OSError, ValueError) as e:  # a NUL byte, a name too long for the file system
        raise w.error("prompts", f"{rel!r} is not a usable path ({e})") from None
    if not found:
        raise w.error("prompts", f"prompt file {prompts_path} not found")
    prompts = load_prompts(prompts_path, where=w.where("prompts"), need_ids=tokenizer == "none",
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
    return WorkloadSpec(api=api, prompts_path=prompts_path, prompts=prompts, concurrency=tuple(conc), stream=stream,
                        token_range=token_range, **_sizes(w))


def _sizes(w: Section) -> dict[str, int]:
    """output_len, rounds, repeats, warmup_output_len: each in its range, the limit named."""
    return {"output_len": w.int_("output_len", required=True, min_=2, max_=MAX_OUTPUT_TOKENS),
            "rounds": w.int_("rounds", 2, max_=MAX_ROUNDS), "repeats": w.int_("repeats", 3, max_=MAX_REPEATS),
            "warmup_output_len": w.int_("warmup_output_len", 16, max_=MAX_OUTPUT_TOKENS)}


def _grid_workload(w: Section, api: str, conc: tuple[int, ...], stream: bool,
                   token_range: tuple[int, int] | None, contexts: tuple[int, ...]) -> WorkloadSpec:
    """Grid mode: the prompts are made (token ids), not read."""
    for key in ("prompts", "prompt_template"):
        if w.has(key):
            raise w.error(key, "grid mode (workload.contexts) makes its own token-id prompts "
                               "(bench/eagle3/prompts.py): remove it")
    if api == "chat":
        raise w.error("api", "grid mode (workload.contexts) sends token-id prompts: use \"completions\" (the "
                             "OpenAI completions API takes a list of token ids) or \"generate\", not \"chat\"")
    sizes = _sizes(w)
    rounds = sizes["rounds"]
    left_out = _parse_left_out(w, contexts, conc)
    skipped = {(x.context, x.concurrency) for x in left_out}
    ctx, c = max(((x, y) for x in contexts for y in conc if (x, y) not in skipped),
                 key=lambda cell: cell[0] * cell[1])  # the largest cell measured
    if (held := ctx * c * rounds) > MAX_CELL_TOKENS:
        raise w.error("contexts", f"the largest cell holds {held} prompt token ids (context {ctx} x "
                                  f"concurrency {c} x rounds {rounds}), more than {MAX_CELL_TOKENS} "
                                  "(limits.MAX_CELL_TOKENS)")
    return WorkloadSpec(api=api, prompts_path=None, prompts=(), concurrency=conc, stream=stream,
                        token_range=token_range, contexts=contexts, prompt_seed=w.int_("prompt_seed", 0, min_=0),
                        left_out=left_out, **sizes)


LEFT_OUT_SHAPE = '{ context = <int>, concurrency = <int>, why = "<text>" }'


def _parse_left_out(w: Section, contexts: tuple[int, ...], conc: tuple[int, ...]) -> tuple[LeftOutCell, ...]:
    """`left_out = [{ context = 32768, concurrency = 64, why = "..." }, ...]`: cells of the grid not measured, each
    once, each with a reason; not every cell."""
    raw = w.get("left_out", [], False)
    if not isinstance(raw, list):
        raise w.error("left_out", f"expected a list of tables {LEFT_OUT_SHAPE}, got {shown(raw)}")
    out: list[LeftOutCell] = []
    for i, entry in enumerate(raw):
        key = f"left_out[{i}]"
        if not isinstance(entry, dict):
            raise w.error(key, f"expected a table {LEFT_OUT_SHAPE}, got {shown(entry)}")
        if unknown := sorted(set(entry) - {"context", "concurrency", "why"}):
            raise w.error(f"{key}.{unknown[0]}", "unknown key (allowed: concurrency, context, why)")
        for name, values, grid_key in (("context", contexts, "contexts"), ("concurrency", conc, "concurrency")):
            if name not in entry:
                raise w.error(f"{key}.{name}", "missing (required)")
            v = entry[name]
            if isinstance(v, bool) or not isinstance(v, int) or v not in values:
                raise w.error(f"{key}.{name}", f"{shown(v)} is not in workload.{grid_key} {list(values)}")
        why = entry.get("why")
        if not isinstance(why, str) or not why.strip() or not why.isprintable():
            raise w.error(f"{key}.why", f"expected a non-empty line of text (why the cell is not measured), got "
                                        f"{shown(why)}")
        cell = LeftOutCell(context=entry["context"], concurrency=entry["concurrency"], why=why.strip())
        if (twice := next((j for j, x in enumerate(out)
                           if (x.context, x.concurrency) == (cell.context, cell.concurrency)), None)) is not None:
            raise w.error(key, f"context {cell.context}, concurrency {cell.concurrency} is listed twice "
                               f"(left_out[{twice}])")
        out.append(cell)
    if raw and len(out) == len(contexts) * len(conc):
        raise w.error("left_out", f"leaves out every cell of the grid ({len(contexts)} contexts x {len(conc)} "
                                  "concurrency levels): nothing would be measured")
    return tuple(out)


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
                    or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_TOKEN_ID for i in ids)):
                raise ConfigError(f"{at}: \"input_ids\" must be a non-empty list of integers from 0 to {MAX_TOKEN_ID}")
            if token_range is not None:
                bad = [i for i in ids if not token_range[0] <= i < token_range[1]]
                if bad:
                    raise ConfigError(f"{at}: token id {bad[0]} outside workload.token_range "
                                      f"[{token_range[0]}, {token_range[1]})")
            out.append(Prompt(input_ids=tuple(ids)))
    if not out:
        raise ConfigError(f"{where}: prompt file {path} holds no prompts")
    return tuple(out)
