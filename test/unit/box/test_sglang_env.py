"""box/sglang_env.py: how the installed sglang reads its boolean switches, read from its srt/environ.py (ast, never
imported), else the base line's recorded rule; the recorded rules are sglang's own (checked against the pinned
wheels)."""

from __future__ import annotations

import ast
import zipfile

import pytest

from sglang_blackwell.box import sglang_env
from sglang_blackwell.patchset.bases import get_base, list_bases

SGLANGS_RULE = (("true", "1", "yes", "y"), ("false", "0", "no", "n"))
PARSE = """
class EnvBool:
    def parse(self, value):
        {body}
"""


def rule(body: str) -> sglang_env.BoolRule | None:
    return sglang_env.rule_from_source(ast.parse(PARSE.format(body=body.replace("\n", "\n        "))), "t")


def test_a_parse_of_sglangs_shape_is_read_and_applied_as_written():
    r = rule("value = value.strip()\nvalue = value.lower()\nif value in ['on']:\n    return True\n"
             "if value in ('off',):\n    return False\nraise ValueError(value)")
    assert r is not None and (r.true, r.false, r.transforms) == (("on",), ("off",), ("strip", "lower"))
    assert [r.parse(v) for v in (" ON ", "Off", "1", "no")] == [True, False, None, None]


@pytest.mark.parametrize("body", [
    "return value == 'y'",  # another shape: not guessed
    "value = value.lower()\nif value in ['1']:\n    return True\nraise ValueError(value)",  # no off values
    "value = norm(value)\nif value in ['1']:\n    return True\nif value in ['0']:\n    return False\nraise ValueError",
    "if value in ['1']:\n    return True\nif value in ['0']:\n    return True\nraise ValueError(value)",
])
def test_any_other_shape_is_none_so_the_base_lines_rule_applies(body):
    assert rule(body) is None


def test_every_base_line_records_sglangs_rule_and_doctor_falls_back_to_it(tmp_path):
    for b in list_bases():
        assert (b.serving.bool_env_true, b.serving.bool_env_false) == SGLANGS_RULE, b.name
    env = sglang_env.installed(tmp_path, "0.5.14+sm120.4")  # no srt/environ.py there
    assert env.rule.source.startswith("base 0.5.14") and env.defaults == {}
    got = [(r.on, r.understood) for r in (env.read("X", True, {"X": v}) for v in ("off", " 0", "n", "Y", "0"))]
    assert got == [(True, False), (True, False), (False, True), (True, True), (False, True)]
    assert env.read("X", True, {}).text() == "X unset (default on)"


@pytest.mark.network
@pytest.mark.parametrize("base", ["0.5.9", "0.5.14", "0.5.23"])
def test_the_recorded_rule_is_the_one_in_the_pinned_wheels_environ_py(tmp_path, base):
    """What base.toml records is what the line's own srt/environ.py says (read the way doctor reads it)."""
    from sglang_blackwell.patchset.fetch import fetch

    art = get_base(base).package("sglang").files_for(None)[0]
    try:
        whl = fetch(art)
    except Exception as e:
        pytest.skip(f"cannot fetch {art.filename}: {e}")
    with zipfile.ZipFile(whl) as z:
        z.extract("sglang/srt/environ.py", tmp_path)
    env = sglang_env.installed(tmp_path / "sglang", None)
    line = get_base(base).serving
    assert env.rule.source.endswith("environ.py")
    assert (env.rule.true, env.rule.false, env.rule.transforms) == (line.bool_env_true, line.bool_env_false,
                                                                    ("lower",))
