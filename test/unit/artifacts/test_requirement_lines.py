"""The one requirement-file parser (artifacts/requirement_lines.py) the `--deps` lists, the constraint files and the
hashed locks are read with: every committed lock and the lab's list parse, line by line, to what the files say;
a malformed line is an error naming its file and the line where its requirement starts, through each reader."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_blackwell.artifacts.deps import read_pins
from sglang_blackwell.artifacts.lock import read_lock
from sglang_blackwell.artifacts.lock_recipe import constraint_pins
from sglang_blackwell.artifacts.requirement_lines import parse_requirement_lines, read_requirement_lines
from sglang_blackwell.errors import UserError

REPO = Path(__file__).resolve().parents[3]
LOCKS = sorted(REPO.glob("patches/*/locks/py3*.txt"))
LAB_LIST = REPO / "benchmark" / "lab" / "bundle-deps-0.5.14-py312.txt"
HEX = "0123456789abcdef" * 4
LOCK_HEAD = ("# lock-schema: sglang-blackwell/lock/1\n# lock-base: 9.9.9\n# lock-python: 3.12\n"
             "# lock-platform: manylinux_2_34_x86_64\n# lock-inputs: " + "0" * 64 + "\n#\n")


def test_the_committed_files_are_there():
    assert len(LOCKS) >= 8 and LAB_LIST.is_file()


@pytest.mark.parametrize("path", LOCKS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_committed_lock_line_parses_to_what_the_file_says(path: Path):
    raw = path.read_text().splitlines()
    got = read_requirement_lines(path, hashes=True)
    starts = [i for i, ln in enumerate(raw, 1) if ln and not ln.startswith(("#", " "))]
    assert [r.number for r in got] == starts and len(got) > 100
    for r in got:
        name, version = raw[r.number - 1].removesuffix(" \\").split("==")
        digest = raw[r.number].strip().removeprefix("--hash=sha256:")
        assert (r.requirement.name, r.pinned_version, r.hashes) == (name, version, (digest,)), r.where
        assert r.where == f"{path}:{r.number}" and r.text == f"{name}=={version} --hash=sha256:{digest}"
        assert r.comments == (raw[r.number + 1],) and raw[r.number + 1].startswith("    # via ")
    assert {e.name: e.sha256 for e in read_lock(path).entries} == {r.name: r.hashes[0] for r in got}


def test_the_lab_list_parses_line_by_line():
    raw = LAB_LIST.read_text().splitlines()
    got = read_requirement_lines(LAB_LIST, "--deps")
    pins = [(i, ln.strip()) for i, ln in enumerate(raw, 1) if ln.strip() and not ln.startswith("#")]
    assert [(r.number, r.text) for r in got] == pins and len(pins) > 30
    assert all(r.pinned_version == r.text.split("==")[1] and not r.hashes for r in got)
    assert [(p.line, p.text) for p in read_pins(LAB_LIST)] == pins
    assert {n: (v, line) for n, (v, _, line) in constraint_pins([LAB_LIST]).items()} == {
        r.name: (r.pinned_version, r.number) for r in got}


def test_comments_continuations_and_hashes(tmp_path: Path):
    text = ("# head\n"
            "a==1.0  # why\n"
            "\n"
            "b[x]==2.0+local.1 \\\n"
            f"    --hash=sha256:{HEX} \\\n"
            f"    --hash=sha256:{HEX[::-1]}\n"
            "    # via a\n"
            "# a note\n"
            "c @ https://example.invalid/c-1.0-py3-none-any.whl#sha256=00\n"
            'd>=1 ; python_version < "3.99"\n'
            "e===1.0\n")
    got = parse_requirement_lines(text, tmp_path / "r.txt", hashes=True)
    assert [(r.number, r.name) for r in got] == [(2, "a"), (4, "b"), (9, "c"), (10, "d"), (11, "e")]
    a, b, c, d, e = got
    assert a.text == "a==1.0" and a.pinned_version == "1.0" and a.comments == ()
    assert b.hashes == (HEX, HEX[::-1]) and b.pinned_version == "2.0+local.1" and b.requirement.extras == {"x"}
    assert b.comments == ("    # via a", "# a note") and b.where == f"{tmp_path / 'r.txt'}:4"
    assert c.requirement.url == "https://example.invalid/c-1.0-py3-none-any.whl#sha256=00"  # not a comment
    assert c.pinned_version is None and d.pinned_version is None and str(d.requirement.marker)
    assert e.pinned_version == "1.0"
    assert [r.pinned_version for r in parse_requirement_lines("x==1.*\ny===not-pep-440\n", tmp_path / "w")] == [
        None, None]


@pytest.mark.parametrize(("text", "hashes", "line", "why"), [
    ("a==1.0\nnot a requirement\n", False, 2, r"'not a requirement': Expected"),
    ("a==1.0#no-space\n", False, 1, r"'a==1.0#no-space': "),  # `#` after a non-space is no comment (pip)
    ("-r other.txt\n", False, 1, r"not a requirement \(options such as -r"),
    ("a==1.0\n\nb==1.0 --index-url x\n", True, 3, r"'--index-url' is not read here \(only --hash=sha256:"),
    (f"a==1.0 --hash=sha256:{HEX}\n", False, 1, r"is not read here \(a requirement only, no options\)"),
    ("a==1.0 --hash=sha256:abc\n", True, 1, r"'--hash=sha256:abc' is not read here"),
    (f"a==1.0 \\\n\n    --hash=sha256:{HEX}\n", True, 3, r"not a requirement"),  # a blank line ends it
    (f"a==1.0\nb==1.0 \\\n    --hash=sha256:{HEX} \\\n", True, 2, r"ends the file with a backslash"),
])
def test_a_malformed_line_names_file_and_line(tmp_path: Path, text: str, hashes: bool, line: int, why: str):
    f = tmp_path / "reqs.txt"
    f.write_text(text)
    with pytest.raises(UserError, match=rf"^--deps {re.escape(str(f))}:{line}: .*{why}"):
        read_requirement_lines(f, "--deps", hashes=hashes)
    with pytest.raises(UserError, match=rf"^{re.escape(str(f))}:{line}: .*{why}"):
        read_requirement_lines(f, hashes=hashes)


def test_each_reader_names_file_and_line(tmp_path: Path):
    deps = tmp_path / "deps.txt"
    deps.write_text("# list\na==1.0\nb>=1.0  # a range\n")
    with pytest.raises(UserError, match=rf"^--deps {re.escape(str(deps))}:3: 'b>=1.0' is not an exact pin"):
        read_pins(deps)
    deps.write_text(f"a==1.0\nb==1.0 --hash=sha256:{HEX}\n")
    with pytest.raises(UserError, match=rf"^--deps {re.escape(str(deps))}:2: .*no options"):
        read_pins(deps)
    deps.write_text("a==1.0\nA==1.0\n")
    with pytest.raises(UserError, match=rf"^--deps {re.escape(str(deps))}:2: A is pinned twice \(line 1 too\)"):
        read_pins(deps)
    cons = tmp_path / "cons.txt"
    cons.write_text("a==1.0\nb>=2  # not a pin: not taken\nc ==\n")
    with pytest.raises(UserError, match=rf"^constraint file {re.escape(str(cons))}:3: 'c =='"):
        constraint_pins([cons])
    cons.write_text("a==1.0\nb>=2\n")
    assert constraint_pins([cons]) == {"a": ("1.0", cons, 1)}
    lock = tmp_path / "py312.txt"
    lock.write_text(LOCK_HEAD + f"a==1.0 \\\n    --hash=sha256:{HEX}\n    # via x, y\nb>=1.0 \\\n"
                    f"    --hash=sha256:{HEX}\n")
    with pytest.raises(UserError, match=rf"^{re.escape(str(lock))}:10: 'b>=1.0 --hash=sha256:{HEX}' is not "
                                        r"`name==version --hash=sha256:HEX`"):
        read_lock(lock)
    lock.write_text(LOCK_HEAD + f"a==1.0 \\\n    --hash=sha256:{HEX}\n    # via x, y\n")
    (e,) = read_lock(lock).entries
    assert (e.name, e.version, e.sha256, e.via) == ("a", "1.0", HEX, ("x", "y"))
