"""Hostile input, round 3 class 4 (issue 32): config numbers and keys parse strictly. Two keys that are the same
integer (`1` and `"01"`) are refused naming both; integer keys are written one way; numbers have ranges whose limit
the error names (a context of 10^12 tokens, a concurrency of 10^6, --request-timeouts 1e308, a TP of 10^20 in serve,
doctor, bench and a config); our environment switches go through one parser that says what it accepts
(`SGLANG_BLACKWELL_OFFLINE=true` means on, `maybe` is refused). Each case is the real CLI, judged by
support/hostile.py: exit 2, one line naming the thing at fault, nothing written."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest
from bench_fakes import write_grid_config

from support.hostile import Case, assert_clean

from . import core_world as w
from .test_bench_serve_doctor import CONFIG, bench_case, cfg_setup
from .test_bench_serve_doctor import serve_case as _serve_case

BIG = "99999999999999999999"  # 10^20: a TP nobody has


def serve_case(*a, **kw) -> Case:
    return dataclasses.replace(_serve_case(*a, **kw), item="32.4")


def grid_setup(**kw: str) -> Callable[[Path], None]:
    """The fake 2-arm grid config (contexts 16, 64; concurrency 1, 2) as fake.toml, with keyword overrides."""
    def setup(tmp: Path) -> None:
        (tmp / CONFIG).write_text(write_grid_config(tmp, **kw).read_text())
    return setup


def grid_case(id: str, names: tuple[str, ...], **kw: str) -> Case:
    return bench_case(id, "32.4", [], names, grid_setup(**kw))


KEYS = [
    grid_case("grid-concurrency-keys-1-and-01", ("min_ratio.16", "'1'", "'01'", "same concurrency 1"),
              min_ratio='{ 16 = { 1 = 1.3, "01" = 1.1 }, 64 = { 1 = 1.2 } }'),
    grid_case("grid-context-keys-16-and-016", ("min_ratio", "'16'", "'016'", "same context 16"),
              min_ratio='{ 16 = { 1 = 1.3 }, "016" = { 1 = 0.5 }, 64 = { 1 = 1.2 } }'),
    grid_case("grid-context-key-plus-sign", ("min_ratio.+16", "'+16'"), min_ratio='{ "+16" = { 1 = 1.3 } }'),
    grid_case("grid-concurrency-key-underscore", ("min_ratio.16.0_1", "'0_1'"), min_ratio='{ 16 = { "0_1" = 1.3 } }'),
    bench_case("concurrency-keys-1-and-plus-1", "32.4", [], ("min_ratio", "'1'", "'+1'"),
               cfg_setup(("min_ratio = { 1 = 1.3 }", 'min_ratio = { 1 = 1.3, "+1" = 0.1 }'))),
    bench_case("concurrency-key-leading-zero", "32.4", [], ("min_ratio.01", "'01'"),
               cfg_setup(("min_ratio = { 1 = 1.3 }", 'min_ratio = { "01" = 1.3 }'))),
    bench_case("concurrency-key-spaces", "32.4", [], ("min_ratio", "' 1'"),
               cfg_setup(("min_ratio = { 1 = 1.3 }", 'min_ratio = { " 1" = 1.3 }'))),
]

RANGES = [
    grid_case("grid-context-10-to-the-12", ("[workload] contexts", "1048576"), contexts="[16, 1000000000000]",
              min_ratio="{ 16 = { 1 = 1.3 } }"),
    grid_case("grid-concurrency-a-million", ("[workload] concurrency", "4096"), concurrency="[1, 1000000]",
              min_ratio="{ 16 = { 1 = 1.3 } }"),
    grid_case("grid-cell-too-large", ("[workload] contexts", "MAX_CELL_TOKENS", "1048576 x concurrency 4096"),
              contexts="[16, 1048576]", concurrency="[1, 4096]", min_ratio="{ 16 = { 1 = 1.3 } }"),
    bench_case("output-len-310-digits", "32.4", [], ("[workload] output_len", "1048576"),
               cfg_setup(("output_len = 32", "output_len = " + "9" * 310))),
    bench_case("rounds-a-billion", "32.4", [], ("[workload] rounds", "10000"),
               cfg_setup(("rounds = 2", "rounds = 1000000000"))),
    bench_case("startup-timeout-1e308", "32.4", [], ("[server] startup_timeout_s", "1e+09"),
               cfg_setup(("startup_timeout_s = 20", "startup_timeout_s = 1e308"))),
    bench_case("config-tp-10-to-the-20", "32.4", [], ("[server] tp", "1024"), cfg_setup(("tp = 2", f"tp = {BIG}"))),
    bench_case("request-timeouts-1e308", "32.4", ["--request-timeouts", "1e308,1e308,1e308"],
               ("--request-timeouts", "604800"), cfg_setup()),
    bench_case("deadline-1e308", "32.4", ["--deadline-s", "1e308"], ("--deadline-s", "604800"), cfg_setup()),
    bench_case("deadline-infinity", "32.4", ["--deadline-s", "inf"], ("--deadline-s", "604800"), cfg_setup()),
    bench_case("bench-tp-10-to-the-20", "32.4", ["--tp", BIG], ("--tp", "1024"), cfg_setup()),
    Case("doctor-tp-10-to-the-20", "32.4", ["doctor", "--tp", BIG, "--out", "{tmp}/d.json"], names=("--tp", "1024"),
         watch=("d.json",)),
    Case("qualify-tp-10-to-the-20", "32.4", ["qualify", "--tp", BIG, "--out", "{tmp}/q"], names=("--tp", "1024"),
         watch=("q",)),
    serve_case("serve-tp-10-to-the-20", ["--tp", BIG], ("--tp", BIG, "1024")),
    serve_case("serve-tp-size-equals-10-to-the-20", [f"--tp-size={BIG}"], (f"--tp-size={BIG}", "1024")),
    serve_case("serve-config-tp-10-to-the-20", ["--config", "{tmp}/s.yaml"], ("s.yaml", "tp-size", "1024"),
               files={"s.yaml": f"tp-size: {BIG}\n".encode()}),
    serve_case("serve-tp-5000-digits", ["--tp", "7" * 5000], ("--tp", "5000 characters")),
]


@pytest.mark.parametrize("case", KEYS + RANGES, ids=[c.id for c in KEYS + RANGES])
def test_config_numbers_and_keys_parse_strictly(tmp_path, case):
    assert_clean(case, tmp_path)


# ---- our environment switches: one parser -------------------------------------------------------------------

def _cold(tmp: Path) -> None:
    w.cached_wheel(tmp).unlink()


def switch_case(id: str, env: dict[str, str], names: tuple[str, ...], argv: list[str] | None = None,
                **kw) -> Case:
    return w.case(id, "32.4", argv or ["build", "--base", w.BASE, "--out", "{tmp}/dist"], names=names,
                  env=env, setup=w.world(_cold), watch=("dist", "cache"), **kw)


SWITCHES = [
    switch_case("offline-true-means-on", {"SGLANG_BLACKWELL_OFFLINE": "true"},
                (w.WHEEL, "SGLANG_BLACKWELL_OFFLINE is on")),
    switch_case("offline-yes-any-case-means-on", {"SGLANG_BLACKWELL_OFFLINE": " Yes "},
                (w.WHEEL, "SGLANG_BLACKWELL_OFFLINE is on")),
    switch_case("offline-maybe-refused", {"SGLANG_BLACKWELL_OFFLINE": "maybe"},
                ("SGLANG_BLACKWELL_OFFLINE='maybe'", "1, true, on, yes", "0, false, off, no")),
    switch_case("debug-maybe-refused", {"SGLANG_BLACKWELL_DEBUG": "2"}, ("SGLANG_BLACKWELL_DEBUG='2'", "1, true")),
    switch_case("nccl-disabled-refused", {"SGLANG_BLACKWELL_NCCL": "disabled"},
                ("SGLANG_BLACKWELL_NCCL='disabled'", "0, false, off, no"), argv=["nccl", "show"]),
]


@pytest.mark.parametrize("case", SWITCHES, ids=[c.id for c in SWITCHES])
def test_env_switches_go_through_one_parser(tmp_path, case):
    assert_clean(case, tmp_path)
