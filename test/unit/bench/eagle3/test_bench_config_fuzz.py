"""Property (issue 18, the fuzz suite's bench-config part): any TOML that parses, given to `bench eagle3 --config`,
is either a config (the command goes on) or a clean ConfigError: exit 2, one line naming the config file and the
key at fault, and nothing written. Never a traceback.

The TOML documents are the fake 3-arm config with random edits (a key dropped, a value replaced by any TOML value,
an unknown key added, a table replaced), written with tomlio.dumps and parsed back by tomllib. The command runs in
this process as `--from-runs` of an empty runs file, so a config that parses goes on to build (and write) a
receipt: that path must not crash either."""

from __future__ import annotations

import contextlib
import copy
import io
import math
import tempfile
from pathlib import Path
from typing import Any

from bench_fakes import write_config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sglang_blackwell.cli import main
from sglang_blackwell.tomlio import dumps, tomllib

with tempfile.TemporaryDirectory(prefix="bench-config-fuzz-") as _scratch:  # read at import, never left behind
    BASE: dict[str, Any] = tomllib.loads(write_config(Path(_scratch), model_dirs=False).read_text())
    PROMPTS = (Path(_scratch) / "prompts.jsonl").read_bytes()

hostile_text = st.one_of(
    st.text(max_size=30),
    st.text(alphabet="/.\\\x00\n\u2028 ab,=-+_{}", max_size=8),  # paths, separators, line breaks
    st.sampled_from(["", "baseline", "eagle3", "eagle3+fusion", "prompts.jsonl", "/", "..", "../x", "a/b", "--tp",
                     "--port=1", "generate", "chat", "completions", "none", "target", "{prompt}", "{prompt}{prompt}",
                     "x" * 300]))
keys = st.one_of(st.text(min_size=1, max_size=12), hostile_text.filter(bool))
numbers = st.one_of(st.integers(min_value=-2**70, max_value=2**70), st.sampled_from([0, 1, 2, -1, 65535, 65536]),
                    st.floats(allow_nan=True, allow_infinity=True))
scalars = st.one_of(st.booleans(), numbers, hostile_text)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(keys, inner, max_size=4)), max_leaves=8)


def like(original: Any) -> st.SearchStrategy:
    """A value of the original's kind with hostile content (half the time: any value at all)."""
    if isinstance(original, bool):
        kind = st.booleans()
    elif isinstance(original, (int, float)):
        kind = numbers
    elif isinstance(original, str):
        kind = hostile_text
    elif isinstance(original, list):
        kind = st.lists(hostile_text if all(isinstance(x, str) for x in original) else numbers, max_size=5)
    else:
        kind = st.dictionaries(keys, values, max_size=4)
    return st.one_of(kind, values)


def _paths(d: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for k, v in d.items():
        out.append((*prefix, k))
        if isinstance(v, dict):
            out += _paths(v, (*prefix, k))
    return out


PATHS = _paths(BASE)


@st.composite
def configs(draw) -> dict[str, Any]:
    data = copy.deepcopy(BASE)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        path = draw(st.sampled_from(PATHS))
        parent: Any = data
        for k in path[:-1]:
            parent = parent.get(k) if isinstance(parent, dict) else None
        if not isinstance(parent, dict):
            continue
        op = draw(st.sampled_from(["replace", "replace", "delete", "add"]))
        if op == "delete":
            parent.pop(path[-1], None)
        elif op == "add":
            parent[draw(keys)] = draw(values)
        else:
            parent[path[-1]] = draw(like(parent.get(path[-1])))
    return data


def _toml(data: dict[str, Any]) -> str | None:
    """tomlio.dumps has no form for nan/inf; write those as TOML's own nan / inf literals by hand-replacing the
    sentinel strings it does write."""
    marks: dict[str, str] = {}

    def swap(v: Any) -> Any:
        if isinstance(v, float) and not math.isfinite(v):
            mark = f"@@float{len(marks)}@@"
            marks[mark] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
            return mark
        if isinstance(v, list):
            return [swap(x) for x in v]
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        return v

    try:
        text = dumps(swap(data))
    except ValueError:  # a shape TOML cannot write (e.g. a key that is also a table header elsewhere)
        return None
    for mark, lit in marks.items():
        text = text.replace(f'"{mark}"', lit)
    return text


@settings(max_examples=400, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(configs())
def test_any_toml_config_is_a_config_or_one_clean_line(data):
    text = _toml(data)
    if text is None:
        return
    tomllib.loads(text)  # what bench eagle3 reads is TOML
    with tempfile.TemporaryDirectory(prefix="cfg-") as d:
        tmp = Path(d)
        cfg = tmp / "fake.toml"
        cfg.write_text(text)
        (tmp / "prompts.jsonl").write_bytes(PROMPTS)
        (tmp / "none_runs.jsonl").write_text("")
        before = sorted(p.name for p in tmp.iterdir())
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(["bench", "eagle3", "--config", str(cfg), "--out", str(tmp / "out"), "--no-plots",
                       "--from-runs", str(tmp / "none_runs.jsonl")])
        msg = err.getvalue()
        if rc == 2:
            lines = msg.strip().splitlines()
            assert len(lines) == 1, msg
            assert lines[0].startswith(f"sglang-blackwell bench: error: {cfg}: "), msg
            assert "[" in lines[0] or "top level" in lines[0], msg  # the section (and key) at fault
            assert sorted(p.name for p in tmp.iterdir()) == before  # nothing written on refusal
            assert cfg.read_text() == text
        else:
            assert rc == 1, msg  # a config: no runs, so the receipt fails the verdict
            written = sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.name not in before)
            assert len(written) == 2 and written[0] == "out", written  # out/ and the receipt in it, nothing else
            assert written[1].startswith("out/bench-eagle3_") and written[1].endswith(".json"), written
