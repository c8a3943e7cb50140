"""The yardstick itself: each class is seen when it should be (a check that cannot fail is no check)."""

from __future__ import annotations

from pathlib import Path

from support import hostile
from support.hostile import Case


def _cli(code: str) -> tuple[str, ...]:
    import sys

    return (sys.executable, "-c", code)


def test_clean_bad_input(tmp_path: Path):
    c = Case("unknown-base", "11", ["build", "--base", "9.9.nope"], names=("9.9.nope",))
    assert hostile.check(c, tmp_path).cls == "clean"


def test_the_four_classes(tmp_path: Path):
    tb = hostile.check(Case("tb", "11", []), tmp_path, cli=_cli("raise ValueError('x')"))
    assert tb.cls == "traceback"
    wrong = hostile.check(Case("rc", "11", [], names=("--flag",)), tmp_path,
                          cli=_cli("import sys; print('error: something', file=sys.stderr); sys.exit(1)"))
    assert wrong.cls == "wrong" and "exit 1" in wrong.why
    (tmp_path / "state").write_text("before")
    dmg = hostile.check(Case("dmg", "11", [], watch=("state",)), tmp_path,
                        cli=_cli("open('state', 'w').write('after'); import sys; sys.exit(2)"))
    assert dmg.cls == "damaged" and "state" in dmg.why
    left = hostile.check(Case("left", "11", []), tmp_path,
                         cli=_cli("open('.x.partial', 'w'); import sys; print('e', file=sys.stderr); sys.exit(2)"))
    assert left.cls == "damaged" and ".x.partial" in left.why
    two = hostile.check(Case("two-lines", "11", []), tmp_path,
                        cli=_cli("import sys; print('a\\nb', file=sys.stderr); sys.exit(2)"))
    assert two.cls == "wrong" and "one line" in two.why


def test_only_the_net_caught_it_is_a_traceback(tmp_path: Path):
    line = ("sglang-blackwell build: internal error: KeyError: 'x' (unexpected KeyError at build.py:9 in build); this "
            "is a bug of sglang-blackwell 0.1.0: please report it with /tmp/r.txt")
    net = hostile.check(Case("net", "11", [], rc=70), tmp_path,
                        cli=_cli(f"import sys; print({line!r}, file=sys.stderr); sys.exit(70)"))
    assert net.cls == "traceback" and "net" in net.why
