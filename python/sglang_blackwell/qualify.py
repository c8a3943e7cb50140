"""`sglang-blackwell qualify`: one command that qualifies a GPU box and writes ONE receipt to send back.

Steps, in this order, each a real subprocess of this interpreter with its own log and its own receipt:
  doctor     `sglang-blackwell doctor`: what works on this box and why not
  gpu-tests  pytest -m gpu over the GPU correctness tests of a checkout (test/gpu: the lab-line suite, the
             all-reduce numerics, the NCCL profile check; the AOT check where flashinfer carries AOT modules)
  allreduce  `sglang-blackwell bench allreduce --tune` at --tp (default: every GPU), table kept in the output
  eagle3     `sglang-blackwell bench eagle3` with --config, or the target box's config with --target/--draft
A step that cannot run here (no GPU, one GPU for an all-reduce, no model paths, no checkout, no pytest) is
recorded as `skipped` with the reason, never as passed. A failing step does not stop the later ones unless
--fail-fast. Exit status: 0 no step failed, 1 a step failed, 2 bad input (nothing is written), 130
interrupted (the receipt is still written, saying so).

Output directory (default benchmark/results/qualify-<UTC time>/ in a checkout, else ./qualify-<UTC time>/):
  qualify.json          the receipt (receipts.py envelope, kind "qualify"): summary.steps gives each step's
                        verdict, reason, and where its own receipt and log are (paths relative to the folder)
  doctor/               doctor.json
  gpu-tests/            gpu-tests.json, junit.xml, labline/ (+ lab-line-gpu-suite-<date>.json if it ran)
  allreduce/            allreduce-tp<N>.json (+ .png), allreduce_table.json (the tuned dispatch table)
  eagle3/               bench-eagle3_*.json, its runs, plots and server logs (+ the config, if rewritten)
  logs/<step>.log       everything each step printed
--pack FILE.tar.gz bundles the directory (rank > 0 profiler traces left out).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import importlib.util
import json
import os
import shlex
import signal
import subprocess
import sys
import tarfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import UserError
from .paths import PACKAGE_DIR, repo_root

KIND = "qualify"
SCHEMA = "sglang-blackwell/qualify/1"
STEPS = ("doctor", "gpu-tests", "allreduce", "eagle3")
VERDICTS = ("passed", "failed", "skipped")
RECEIPT_NAME = "qualify.json"
DEFAULT_TEMPLATE = "benchmark/kimi-k2.5-8xpcie.toml"  # the target box: used with --target/--draft alone
GPU_TEST_TARGETS = ("test/gpu/labline", "test/gpu/test_allreduce_numerics.py", "test/gpu/test_nccl_profile_gpu.py")
AOT_TEST = "test/gpu/test_aot_gpu.py"
GPU_TEST_MARKERS = "gpu and not slow"  # slow: test_bench_eagle3_lab.py (9 launches: the eagle3 step's job)
ALLREDUCE_PROFILES = "none,pcie-ll"
# the project's rule for every GPU process: no NVLink multicast (bench allreduce refuses to start without it)
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# seconds per step before its process group is stopped (None: no limit; bench eagle3 bounds its own servers)
STEP_TIMEOUT_S: dict[str, float | None] = {"doctor": 600, "gpu-tests": 3600, "allreduce": 3600, "eagle3": None}
# after SIGINT/SIGTERM, how long a step may take to clean up (bench eagle3 takes its servers down) before SIGKILL
STEP_GRACE_S = {"doctor": 10.0, "gpu-tests": 90.0, "allreduce": 30.0, "eagle3": 180.0}
RESERVED_ARGS = {  # set by qualify itself; passing them through --<step>-args would contradict the plan
    "allreduce": ("--tp", "--out", "--table", "--from-receipt", "--list-backends"),
    "eagle3": ("--config", "--out", "--from-runs", "--attach"),
    "gpu-tests": ("--junitxml", "--junit-xml"),
}

Progress = Callable[[str], None]


# ---- the plan: every input checked before anything is written ------------------------------------------------

@dataclass
class Eagle3Plan:
    config_path: Path  # the config as given or the template
    raw: dict[str, Any]  # what will run (model paths / tp / prompts rewritten where derived)
    derived: bool  # True: qualify writes raw as a new TOML into the output directory
    tp: int
    name: str
    why: str  # where the config came from, for the receipt


@dataclass
class Plan:
    out: Path
    pack: Path | None
    skip: dict[str, str]  # step -> why (from --skip)
    fail_fast: bool
    tp: int | None  # --tp as given
    gpus: int
    topology: Any  # topology.Topology
    checkout: Path | None
    eagle3: Eagle3Plan | None
    lab_pair: Path | None
    gpu_tests: list[str] | None  # --gpu-tests as given
    repeats: int | None
    extra: dict[str, list[str]]  # step -> extra arguments
    python: str
    echo: bool
    options: dict[str, Any]
    progress: Progress = field(default=lambda msg: None)
    versions: dict[str, Any] | None = None  # the stack's versions once a step has recorded them (doctor)
    warnings: list[str] = field(default_factory=list)  # said at the start, kept in the receipt


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = (__doc__ or "").strip()
    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.add_argument("--out", help="output directory, must not exist or be empty "
                                 "(default: benchmark/results/qualify-<UTC time>/ in a checkout, else ./)")
    p.add_argument("--pack", metavar="FILE.tar.gz", help="also bundle the output directory into this tarball")
    p.add_argument("--skip", default="", metavar="STEPS", help=f"comma-separated steps not to run: {','.join(STEPS)}")
    p.add_argument("--fail-fast", action="store_true", help="run no further step after one fails")
    p.add_argument("--tp", type=int, help="GPUs for bench allreduce (default: all) and for bench eagle3 "
                                          "(default: the config's tp; with --target/--draft alone: all GPUs)")
    p.add_argument("--target", metavar="PATH", help="target model directory for bench eagle3")
    p.add_argument("--draft", metavar="PATH", help="EAGLE-3 draft model directory for bench eagle3")
    p.add_argument("--config", metavar="FILE", help="bench eagle3 config (benchmark/<name>.toml); --target/--draft "
                                                    f"override its model paths (without it: {DEFAULT_TEMPLATE})")
    p.add_argument("--repeats", type=int, help="bench eagle3 launches per arm (default: the config's)")
    p.add_argument("--lab-pair", metavar="DIR", help="gpu-tests: the generated lab pair (DIR/target, DIR/draft; "
                                                     "benchmark/models/gen_lab_pair.py) for the lab-line suite")
    p.add_argument("--gpu-tests", metavar="PATHS", help="gpu-tests: pytest targets, comma-separated, relative to "
                                                        "the checkout (default: " + ",".join(GPU_TEST_TARGETS) + ")")
    p.add_argument("--pytest-args", default="", metavar="ARGS",
                   help="gpu-tests: extra pytest arguments (one string, given with '='): --pytest-args='-k dist'")
    p.add_argument("--allreduce-args", default="", metavar="ARGS",
                   help="extra bench allreduce arguments (one string, given with '='), e.g. "
                        "--allreduce-args='--tokens 1,3,64 --reps 10'")
    p.add_argument("--eagle3-args", default="", metavar="ARGS",
                   help="extra bench eagle3 arguments (one string, given with '=': --eagle3-args='--no-plots')")
    p.add_argument("--quiet", action="store_true", help="only step headers and verdicts, not each step's output")


def parse_skip(text: str) -> dict[str, str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    unknown = [n for n in names if n not in STEPS]
    if unknown:
        raise UserError(f"--skip: unknown step {unknown[0]!r} (steps: {', '.join(STEPS)})")
    return {n: "--skip" for n in names}


def _split_args(opt: str, text: str, step: str) -> list[str]:
    try:
        args = shlex.split(text or "")
    except ValueError as e:
        raise UserError(f"{opt}: cannot split {text!r}: {e}") from None
    for a in args:
        if a.split("=", 1)[0] in RESERVED_ARGS.get(step, ()):
            raise UserError(f"{opt}: {a.split('=', 1)[0]} is set by qualify itself; "
                            f"see `sglang-blackwell qualify --help`")
    return args


def _model_dir(opt: str, value: str) -> Path:
    p = Path(value).expanduser()
    if not p.is_dir():
        raise UserError(f"{opt} {value}: no such directory (give the local model directory; Hugging Face ids "
                        "go into a --config)")
    if not (p / "config.json").is_file():
        raise UserError(f"{opt} {value}: not a model directory (no config.json)")
    return p.resolve()


def _looks_local(path: str) -> bool:
    return path.startswith(("/", "./", "../", "~"))


def _checkout() -> Path | None:
    """The sglang-blackwell checkout this code runs from, else the current directory if it is one."""
    root = repo_root()
    if root is not None and (root / "test" / "gpu").is_dir():
        return root
    cwd = Path.cwd()
    if (cwd / "test" / "gpu").is_dir() and (cwd / "benchmark").is_dir():
        return cwd
    return root


def plan_eagle3(a: argparse.Namespace, checkout: Path | None, gpus: int) -> Eagle3Plan | None:
    """The bench eagle3 config to run, validated now (None: no model paths given, the step is skipped)."""
    from .bench.config import load_config, parse_config

    if not (a.config or a.target or a.draft):
        return None
    target = _model_dir("--target", a.target) if a.target else None
    draft = _model_dir("--draft", a.draft) if a.draft else None
    if a.config:
        path = Path(a.config).expanduser().resolve()
        why = f"--config {a.config}" + (" with --target/--draft" if target or draft else "")
    else:
        if not (target and draft):
            raise UserError("bench eagle3 needs both --target PATH and --draft PATH (or a --config)")
        if checkout is None or not (checkout / DEFAULT_TEMPLATE).is_file():
            raise UserError(f"--target/--draft without --config use {DEFAULT_TEMPLATE} of a sglang-blackwell "
                            "checkout, and none is here: run from a checkout or pass --config FILE")
        path = checkout / DEFAULT_TEMPLATE
        why = f"{DEFAULT_TEMPLATE} (the target box's flags and arms) with --target/--draft"
    cfg = load_config(path)  # ConfigError (a UserError) names the file and key
    raw = json.loads(json.dumps(cfg.raw))  # deep copy
    derived = False
    if target:
        raw["model"]["target"] = str(target)
        derived = True
    if draft:
        raw["model"]["draft"] = str(draft)
        derived = True
    tp = cfg.server.tp
    if a.tp is not None and a.tp != tp:
        tp = raw["server"]["tp"] = a.tp
        why += f", --tp {a.tp}"
        derived = True
    elif not a.config and gpus and gpus != tp:
        tp = raw["server"]["tp"] = gpus  # the template on a box with another GPU count: all of them
        why += f", TP={gpus} (every GPU here)"
        derived = True
    for key in ("target", "draft"):
        v = raw["model"].get(key)
        if isinstance(v, str) and _looks_local(v) and not Path(v).expanduser().is_dir():
            raise UserError(f"{path}: [model] {key} = {v!r}: no such directory"
                            + ("" if target or draft else " (override it with --target/--draft)"))
    if gpus and tp > gpus:
        raise UserError(f"bench eagle3 at TP={tp} ({'--tp' if a.tp else path}) needs {tp} GPUs; "
                        f"this box has {gpus} (pass --tp {gpus})")
    if derived:  # the rewritten config lives elsewhere: its prompt file path becomes absolute
        raw["workload"]["prompts"] = str(cfg.workload.prompts_path)
        raw["description"] = (cfg.description + " " if cfg.description else "") + "[qualify: " + why + "]"
        parse_config(raw, path)  # validate what will be written, now
    return Eagle3Plan(config_path=path, raw=raw, derived=derived, tp=tp, name=cfg.name, why=why)


def default_out(now: dt.datetime | None = None) -> Path:
    stamp = (now or dt.datetime.now(dt.timezone.utc)).strftime("%Y%m%dT%H%M%SZ")
    root = repo_root()
    return (root / "benchmark" / "results" if root else Path.cwd()) / f"qualify-{stamp}"


def make_plan(a: argparse.Namespace, *, topology: Any = None) -> Plan:
    """Check every input; raise UserError on the first bad one. Writes nothing."""
    from .topology import detect

    skip = parse_skip(a.skip)
    if len(skip) == len(STEPS):
        raise UserError(f"--skip {a.skip}: every step skipped, nothing to qualify")
    if a.tp is not None and a.tp < 1:
        raise UserError(f"--tp must be >= 1, got {a.tp}")
    if a.repeats is not None and a.repeats < 1:
        raise UserError(f"--repeats must be >= 1, got {a.repeats}")
    extra = {"gpu-tests": _split_args("--pytest-args", a.pytest_args, "gpu-tests"),
             "allreduce": _split_args("--allreduce-args", a.allreduce_args, "allreduce"),
             "eagle3": _split_args("--eagle3-args", a.eagle3_args, "eagle3")}
    out = Path(a.out) if a.out else default_out()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"--out {out}: exists and is not an empty directory (a qualification gets its own)")
    pack = None
    if a.pack:
        pack = Path(a.pack)
        if not pack.name.endswith((".tar.gz", ".tgz")):
            raise UserError(f"--pack {a.pack}: expected a .tar.gz (or .tgz) file name")
        if not pack.parent.is_dir():
            raise UserError(f"--pack {a.pack}: directory {pack.parent} does not exist")
        if pack.resolve().is_relative_to(out.resolve()):
            raise UserError(f"--pack {a.pack}: must not be inside --out {out}")
    lab_pair = None
    if a.lab_pair:
        lab_pair = Path(a.lab_pair).expanduser().resolve()
        for sub in ("target", "draft"):
            if not (lab_pair / sub / "config.json").is_file():
                raise UserError(f"--lab-pair {a.lab_pair}: no {sub}/config.json (generate the pair: python3 "
                                f"benchmark/models/gen_lab_pair.py --out {a.lab_pair} --device cuda)")
    warnings = []
    if lab_pair:
        from .gpu_suite_receipt import BASE as LAB_BASE
        from .stackinfo import dist_facts

        sg = dist_facts("sglang")
        if sg and not sg["version"].startswith(LAB_BASE + "+") and sg["version"] != LAB_BASE:
            warnings.append(f"--lab-pair: the lab-line suite is written for sglang {LAB_BASE} (its server flags); "
                            f"this environment has sglang {sg['version']}: expect its server launches to fail")
    topo = topology if topology is not None else detect()
    gpus = topo.gpu_count
    if a.tp is not None and gpus and a.tp > gpus:
        raise UserError(f"--tp {a.tp}: this box has {gpus} GPU(s)")
    checkout = _checkout()
    gpu_tests = [t.strip() for t in a.gpu_tests.split(",") if t.strip()] if a.gpu_tests else None
    if gpu_tests is not None:
        if not gpu_tests:
            raise UserError("--gpu-tests: no test paths given")
        for t in gpu_tests:
            base = checkout if checkout and not Path(t).is_absolute() else Path.cwd()
            if not (base / t.split("::")[0]).exists():
                raise UserError(f"--gpu-tests {t}: not found (relative paths are taken from the checkout, "
                                f"{checkout or 'none here'})")
    eagle3 = plan_eagle3(a, checkout, gpus)
    options = {k: getattr(a, k) for k in ("skip", "fail_fast", "tp", "target", "draft", "config", "repeats",
                                          "lab_pair", "gpu_tests", "pytest_args", "allreduce_args",
                                          "eagle3_args", "pack")}
    return Plan(out=out, pack=pack, skip=skip, fail_fast=a.fail_fast, tp=a.tp, gpus=gpus, topology=topo,
                checkout=checkout, eagle3=eagle3, lab_pair=lab_pair, gpu_tests=gpu_tests, repeats=a.repeats,
                extra=extra, python=sys.executable, echo=not a.quiet, options=options, warnings=warnings)


# ---- running one command -------------------------------------------------------------------------------------

@dataclass
class Outcome:
    rc: int | None
    wall_s: float
    timed_out: bool = False
    interrupted: str | None = None
    tail: list[str] = field(default_factory=list)  # last lines it printed
    left_killed: list[int] = field(default_factory=list)  # processes of its session still alive after it


def child_env(extra: dict[str, str] | None = None, *, gpu: bool = True) -> dict[str, str]:
    """This environment + our package first on PYTHONPATH (the steps run this very code); for GPU steps also
    multicast off (where the user set these variables, their value stays: bench allreduce then refuses, and
    says why). doctor gets the user's environment as it is: it reports it."""
    env = dict(os.environ)
    pkg_parent = str(PACKAGE_DIR.parent)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != pkg_parent]
    env["PYTHONPATH"] = os.pathsep.join([pkg_parent, *parts])
    env["PYTHONUNBUFFERED"] = "1"
    if gpu:
        for k, v in NO_MULTICAST.items():
            env.setdefault(k, v)
    env.update(extra or {})
    return env


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _session_left(sid: int) -> list[int]:
    from .bench.server import session_members

    return session_members(sid) if Path("/proc/self/stat").exists() else []


def run_command(cmd: list[str], *, env: dict[str, str], cwd: Path | None, log_path: Path,
                timeout_s: float | None, grace_s: float, echo: bool, tail_n: int = 20) -> Outcome:
    """Run cmd in its own session, its stdout+stderr into log_path (and echoed, indented, to stderr). On a
    timeout or Ctrl-C/SIGTERM to us: SIGINT to its process group (it cleans up: bench eagle3 takes its servers
    down), SIGKILL after grace_s. Processes of its session still alive after it exited are killed and named."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: list[str] = []
    t0 = time.monotonic()
    with open(log_path, "w", buffering=1, errors="replace") as log:
        log.write("$ " + shlex.join(cmd) + "\n")
        try:
            proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True, text=True, bufsize=1,
                                    errors="replace")
        except OSError as e:
            log.write(f"cannot start: {e}\n")
            return Outcome(rc=None, wall_s=0.0, tail=[f"cannot start {cmd[0]}: {e}"])

        def pump() -> None:
            assert proc.stdout is not None
            with contextlib.suppress(ValueError, OSError):  # the log closed under a pipe someone still holds
                for line in proc.stdout:
                    log.write(line)
                    tail.append(line.rstrip("\n"))
                    del tail[:-tail_n]
                    if echo:
                        print("    " + line.rstrip("\n"), file=sys.stderr, flush=True)

        reader = threading.Thread(target=pump, daemon=True)
        reader.start()
        out = Outcome(rc=None, wall_s=0.0)
        try:
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                out.timed_out = True
                log.write(f"\n[qualify] timed out after {timeout_s:.0f} s: SIGINT, SIGKILL after {grace_s:.0f} s\n")
                _stop(proc, grace_s)
        except KeyboardInterrupt as e:
            out.interrupted = str(e) or "Ctrl-C"
            print(f"qualify: interrupted ({out.interrupted}): stopping the step (up to {grace_s:.0f} s; "
                  "again to kill it now)", file=sys.stderr, flush=True)
            try:
                _stop(proc, grace_s)
            except KeyboardInterrupt:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait()
        out.rc = proc.returncode
        left = _session_left(proc.pid)
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        out.left_killed = left
        reader.join(timeout=10)
        if left:
            log.write(f"\n[qualify] processes {left} of the step's session outlived it: killed\n")
        out.wall_s = round(time.monotonic() - t0, 2)
        out.tail = list(tail)
    return out


def _stop(proc: subprocess.Popen, grace_s: float) -> None:
    _signal_group(proc.pid, signal.SIGINT)
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        _signal_group(proc.pid, signal.SIGKILL)
        proc.wait()


# ---- the steps ---------------------------------------------------------------------------------------------------

@dataclass
class StepResult:
    step: str
    verdict: str  # passed | failed | skipped
    reason: str | None = None  # why it failed or was skipped; a note where it passed
    receipt: str | None = None  # its own receipt, relative to the output directory
    log: str | None = None
    rc: int | None = None
    wall_s: float | None = None
    command: list[str] | None = None
    headline: dict[str, Any] = field(default_factory=dict)  # a few numbers from its receipt
    files: list[str] = field(default_factory=list)  # other files it wrote (relative)
    details: dict[str, Any] = field(default_factory=dict)
    interrupted: str | None = None

    def __post_init__(self):
        if self.verdict not in VERDICTS:
            raise ValueError(f"step {self.step}: verdict {self.verdict!r} not in {VERDICTS}")


def skipped(step: str, why: str) -> StepResult:
    return StepResult(step, "skipped", why)


def _rel(plan: Plan, p: Path | None) -> str | None:
    if p is None:
        return None
    try:
        return str(p.resolve().relative_to(plan.out.resolve()))
    except ValueError:
        return str(p)


def _no_gpu_reason(plan: Plan) -> str:
    notes = "; ".join(plan.topology.notes)
    return "no NVIDIA GPU on this machine" + (f" ({notes})" if notes else "")


def _cli(plan: Plan, *args: str) -> list[str]:
    return [plan.python, "-m", "sglang_blackwell.cli", *args]


def _execute(plan: Plan, step: str, cmd: list[str], *, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> tuple[StepResult, Outcome]:
    log = plan.out / "logs" / f"{step}.log"
    plan.progress(f"{step}: {shlex.join(cmd)}  (log: {_rel(plan, log)})")
    o = run_command(cmd, env=env or child_env(), cwd=cwd, log_path=log, timeout_s=STEP_TIMEOUT_S[step],
                    grace_s=STEP_GRACE_S[step], echo=plan.echo)
    r = StepResult(step, "failed", rc=o.rc, wall_s=o.wall_s, command=cmd, log=_rel(plan, log),
                   interrupted=o.interrupted)
    if o.left_killed:
        r.details["left_processes_killed"] = o.left_killed
    return r, o


def _failure(o: Outcome, what: str) -> str:
    if o.interrupted:
        return f"interrupted ({o.interrupted})"
    if o.timed_out:
        return f"{what} timed out"
    last = next((ln.strip() for ln in reversed(o.tail) if ln.strip()), "")
    return f"{what} exited with {o.rc}" + (f": {last[:300]}" if last else "")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def step_doctor(plan: Plan) -> StepResult:
    receipt = plan.out / "doctor" / "doctor.json"
    cmd = _cli(plan, "doctor", "--out", str(receipt), *(["--tp", str(plan.tp)] if plan.tp else []))
    r, o = _execute(plan, "doctor", cmd, env=child_env(gpu=False))
    doc = _read_json(receipt)
    if doc is None:
        r.reason = _failure(o, "doctor") + " (no receipt)"
        return r
    r.receipt = _rel(plan, receipt)
    if isinstance(doc.get("versions"), dict):
        plan.versions = doc["versions"]  # later receipts reuse them: no torch import in this process
    s = doc.get("summary", {})
    r.headline = {k: s.get(k) for k in ("status", "gpus", "capability", "topology_class", "failing", "warnings")}
    if o.interrupted or o.timed_out or o.rc not in (0, 1):
        r.reason = _failure(o, "doctor")
    elif o.rc == 1 or s.get("failing"):
        r.reason = f"doctor: failing item(s): {', '.join(s.get('failing') or ['?'])}"
    else:
        r.verdict = "passed"
        r.reason = (f"warnings: {', '.join(s['warnings'])}" if s.get("warnings") else None)
        if not plan.gpus:
            r.reason = "; ".join(x for x in ("no GPU: the GPU items are n/a", r.reason) if x)
    return r


def flashinfer_aot_modules() -> list[str]:
    """Prebuilt FlashInfer modules in the installed package's AOT slots (a wheel built with `build --aot`)."""
    spec = importlib.util.find_spec("flashinfer")
    roots = [Path(p) / "data" / "aot" for p in (spec.submodule_search_locations or [])] if spec else []
    return sorted({p.stem for r in roots if r.is_dir() for p in r.rglob("*.so")})


def gpu_test_targets(plan: Plan) -> tuple[list[str], dict[str, str]]:
    """The pytest targets, and what was left out and why."""
    if plan.gpu_tests is not None:
        return list(plan.gpu_tests), {}
    targets, left_out = list(GPU_TEST_TARGETS), {}
    if flashinfer_aot_modules():
        targets.append(AOT_TEST)
    elif importlib.util.find_spec("flashinfer") is None:
        left_out[AOT_TEST] = "flashinfer is not installed in this environment"
    else:
        left_out[AOT_TEST] = ("the installed flashinfer has no AOT modules (not a wheel built with "
                              "`sglang-blackwell build --aot`): nothing prebuilt to check")
    return targets, left_out


def step_gpu_tests(plan: Plan) -> StepResult:
    from . import receipts
    from .gpu_suite_receipt import parse_junit

    if not plan.gpus:
        return skipped("gpu-tests", _no_gpu_reason(plan))
    if plan.checkout is None:
        return skipped("gpu-tests", "the GPU tests live in a sglang-blackwell checkout (test/gpu) and this "
                                    "package runs from none: git clone the repository and run qualify there")
    if importlib.util.find_spec("pytest") is None:
        return skipped("gpu-tests", f"pytest is not installed in {plan.python} (pip install pytest)")
    d = plan.out / "gpu-tests"
    junit, labline_out = d / "junit.xml", d / "labline"
    targets, left_out = gpu_test_targets(plan)
    cmd = [plan.python, "-m", "pytest", *targets, "-m", GPU_TEST_MARKERS, "-p", "no:cacheprovider", "-rA",
           "--tb=short", f"--junitxml={junit}", "-o", "junit_family=xunit2", *plan.extra["gpu-tests"]]
    env = {"SGLB_OUT": str(labline_out), "SGLB_PYTHON": plan.python}
    if plan.lab_pair:
        env.update(SGLB_LAB_TARGET=str(plan.lab_pair / "target"), SGLB_LAB_DRAFT=str(plan.lab_pair / "draft"))
    d.mkdir(parents=True, exist_ok=True)
    r, o = _execute(plan, "gpu-tests", cmd, env=child_env(env), cwd=plan.checkout)
    r.details.update(targets=targets, left_out=left_out, markers=GPU_TEST_MARKERS)
    if not junit.is_file():
        r.reason = _failure(o, "pytest") + " (no JUnit XML)"
        return r
    j = parse_junit(junit)
    n = j["counts"]
    r.headline = {"tests_passed": n["passed"], "tests_failed": n["failed"] + n["error"],
                  "tests_skipped": n["skipped"], "pytest_rc": o.rc}
    r.verdict, r.reason, skip_why = judge_gpu_tests(j, o)
    summary = dict(r.headline, passed=r.verdict == "passed", verdict=r.verdict, targets=targets,
                   skip_reasons=skip_why[:20])
    rec = receipts.make_receipt("gpu-tests", summary, machine=plan.topology.machine(), command=cmd,
                                versions=plan.versions, tests=j["cases"], left_out=left_out,
                                markers=GPU_TEST_MARKERS)
    r.receipt = _rel(plan, receipts.write_receipt(rec, d / "gpu-tests.json"))
    r.files.append(_rel(plan, junit))
    if (labline_out / "facts.json").is_file():  # the lab-line suite ran: its own receipt as on the lab
        r.files += _labline_receipt(plan, junit, labline_out, o.rc)
    return r


def judge_gpu_tests(junit: dict[str, Any], o: Outcome) -> tuple[str, str | None, list[str]]:
    """(verdict, reason, distinct skip reasons) of a pytest run: failed if any test failed or errored or
    pytest itself failed; skipped if none passed (all skipped, or none collected); else passed."""
    n = junit["counts"]
    bad = [c for c in junit["cases"] if c["outcome"] in ("failed", "error")]
    skip_why = sorted({(c["message"] or "").removeprefix("Skipped: ") for c in junit["cases"]
                       if c["outcome"] == "skipped"})
    if o.interrupted or o.timed_out:
        return "failed", _failure(o, "pytest"), skip_why
    if bad or o.rc not in (0, 5):  # 5: nothing collected
        names = ", ".join(c["name"].split("::")[-1] for c in bad[:5]) + (" ..." if len(bad) > 5 else "")
        return "failed", f"{len(bad)} GPU test(s) failed: {names}" if bad else _failure(o, "pytest"), skip_why
    if n["passed"] == 0:
        return "skipped", ("every GPU test skipped: " + "; ".join(skip_why[:3]) if skip_why
                           else "no GPU test collected"), skip_why
    return "passed", f"{n['skipped']} skipped: " + "; ".join(skip_why[:3]) if n["skipped"] else None, skip_why


def _labline_receipt(plan: Plan, junit: Path, labline_out: Path, rc: int | None) -> list[str]:
    from .gpu_suite_receipt import build_receipt, load_facts, parse_junit, receipt_name
    from .receipts import write_receipt

    try:
        rec = build_receipt(load_facts(labline_out / "facts.json"), parse_junit(junit), pytest_rc=rc)
        return [_rel(plan, write_receipt(rec, junit.parent / receipt_name()))]
    except Exception as e:  # the suite's facts are its business: note it, keep the step's verdict
        print(f"qualify: lab-line receipt not written: {type(e).__name__}: {e}", file=sys.stderr)
        return []


def allreduce_tp(plan: Plan) -> int:
    return plan.tp if plan.tp is not None else plan.gpus


def step_allreduce(plan: Plan) -> StepResult:
    if not plan.gpus:
        return skipped("allreduce", _no_gpu_reason(plan))
    tp = allreduce_tp(plan)
    if tp < 2:
        return skipped("allreduce", f"TP={tp} ({'--tp' if plan.tp else 'one GPU here'}): an all-reduce needs two GPUs")
    d = plan.out / "allreduce"
    receipt, table = d / f"allreduce-tp{tp}.json", d / "allreduce_table.json"
    cmd = _cli(plan, "bench", "allreduce", "--tp", str(tp), "--tune", "--table", str(table),
               "--nccl-profile", ALLREDUCE_PROFILES, "--out", str(receipt), *plan.extra["allreduce"])
    d.mkdir(parents=True, exist_ok=True)
    r, o = _execute(plan, "allreduce", cmd)
    rec = _read_json(receipt)
    if rec is None:
        r.reason = _failure(o, "bench allreduce") + " (no receipt)"
        return r
    r.receipt = _rel(plan, receipt)
    r.files = [_rel(plan, p) for p in (table, receipt.with_suffix(".png")) if p.is_file()]
    s = rec.get("summary", {})
    r.headline = {k: s.get(k) for k in ("tp", "t3_chosen_backend", "t3_chosen_us", "t3_nccl_norm_us",
                                        "t3_chosen_over_nccl_norm", "t3_nccl_us_by_profile", "checks_passed")}
    if o.rc == 0 and not o.interrupted and not o.timed_out:
        r.verdict = "passed"
    elif o.interrupted or o.timed_out:
        r.reason = _failure(o, "bench allreduce")
    else:
        fails = s.get("failed_checks") or []
        failure = (rec.get("results") or {}).get("failure")
        r.reason = ("numerics failed: " + ", ".join(map(str, fails[:5])) if fails
                    else f"incomplete: {failure}" if failure else _failure(o, "bench allreduce"))
    return r


def step_eagle3(plan: Plan) -> StepResult:
    e = plan.eagle3
    if e is None:
        return skipped("eagle3", "no model paths given (--target PATH --draft PATH, or --config "
                                 "benchmark/<name>.toml)")
    if not plan.gpus:
        return skipped("eagle3", _no_gpu_reason(plan))
    d = plan.out / "eagle3"
    d.mkdir(parents=True, exist_ok=True)
    cfg_path = e.config_path
    if e.derived:
        cfg_path = d / f"{e.name}.toml"
        write_atomic(cfg_path, dump_toml(e.raw))
    cmd = _cli(plan, "bench", "eagle3", "--config", str(cfg_path), "--out", str(d),
               *(["--repeats", str(plan.repeats)] if plan.repeats else []), *plan.extra["eagle3"])
    r, o = _execute(plan, "eagle3", cmd)
    r.details.update(config=str(e.config_path), config_source=e.why, tp=e.tp)
    if e.derived:
        r.files.append(_rel(plan, cfg_path))
    found = sorted(p for p in d.glob("bench-eagle3_*.json") if not p.name.startswith("."))
    rec = _read_json(found[-1]) if found else None
    if rec is None:
        r.reason = _failure(o, "bench eagle3") + " (no receipt)"
        return r
    r.receipt = _rel(plan, found[-1])
    r.files += sorted(_rel(plan, p) for p in d.glob("bench-eagle3_*") if p != found[-1] and p.is_file())
    s = rec.get("summary", {})
    r.headline = {k: s.get(k) for k in ("config", "tp", "speedup_c1", "accept_len", "break_even_accept_len",
                                        "verify_ms_fusion_on", "verify_ms_fusion_off",
                                        "verify_allreduce_norm_ms_fusion_on",
                                        "verify_allreduce_norm_ms_fusion_off", "passed")}
    if o.rc == 0 and s.get("passed") and not o.interrupted:
        r.verdict = "passed"
    elif o.interrupted or o.timed_out:
        r.reason = _failure(o, "bench eagle3")
    else:
        reasons = (rec.get("verdict") or {}).get("reasons") or []
        r.reason = "verdict failed: " + "; ".join(map(str, reasons[:3])) if reasons else _failure(o, "bench eagle3")
    return r


STEP_RUNNERS: dict[str, Callable[[Plan], StepResult]] = {
    "doctor": step_doctor, "gpu-tests": step_gpu_tests, "allreduce": step_allreduce, "eagle3": step_eagle3}


# ---- orchestration, receipt, pack ---------------------------------------------------------------------------------

def run_steps(plan: Plan, progress: Progress) -> tuple[list[StepResult], str | None]:
    """Every step in order; returns the results and why the run was interrupted (None: it was not)."""
    results: list[StepResult] = []
    stop: str | None = None  # why the remaining steps do not run
    interrupted: str | None = None
    for i, name in enumerate(STEPS, 1):
        head = f"[{i}/{len(STEPS)}] {name}"
        if name in plan.skip:
            r = skipped(name, f"not run: {plan.skip[name]}")
        elif stop:
            r = skipped(name, f"not run: {stop}")
        else:
            try:
                r = STEP_RUNNERS[name](plan)
            except KeyboardInterrupt as e:
                r = StepResult(name, "failed", f"interrupted ({e or 'Ctrl-C'})", interrupted=str(e) or "Ctrl-C")
            except Exception as e:  # a broken step must not cost the receipt of the others
                r = StepResult(name, "failed", f"qualify could not run this step: {type(e).__name__}: {e}")
        results.append(r)
        progress(f"{head}: {r.verdict.upper()}" + (f" in {r.wall_s:.0f} s" if r.wall_s is not None else "")
                 + (f": {r.reason}" if r.reason else "") + (f" (receipt {r.receipt})" if r.receipt else ""))
        if r.interrupted and not stop:
            interrupted = r.interrupted
            stop = "interrupted"
        elif r.verdict == "failed" and plan.fail_fast and not stop:
            stop = f"--fail-fast after {name} failed"
    return results, interrupted


def overall(results: list[StepResult]) -> str:
    """failed: a step failed; passed: every step ran and passed; partial: nothing failed, something skipped."""
    if any(r.verdict == "failed" for r in results):
        return "failed"
    return "passed" if all(r.verdict == "passed" for r in results) else "partial"


def installed_base() -> str | None:
    from .stackinfo import dist_facts

    f = dist_facts("sglang")
    return ((f or {}).get("marker") or {}).get("base") if f else None


def build_receipt(plan: Plan, results: list[StepResult], *, interrupted: str | None,
                  versions: dict[str, Any] | None = None) -> dict[str, Any]:
    from .bench import nvidia
    from .receipts import make_receipt

    topo = plan.topology
    machine = topo.machine()
    summary = {
        "status": overall(results),
        "machine": nvidia.machine_label(machine) if topo.gpu_count else topo.summary(),
        "gpus": topo.gpu_count,
        "capability": machine["capability"],
        "topology_class": topo.topology_class(),
        "topology_source": topo.source,
        "steps": {r.step: {k: getattr(r, k) for k in ("verdict", "reason", "receipt", "log", "rc", "wall_s",
                                                        "headline")} for r in results},
        "passed": [r.step for r in results if r.verdict == "passed"],
        "failed": [r.step for r in results if r.verdict == "failed"],
        "skipped": [r.step for r in results if r.verdict == "skipped"],
    }
    if topo.is_simulated:
        summary["note"] = (f"topology simulated ({topo.source}): the GPU steps ran against a machine "
                           "that may not be this one")
    tp = allreduce_tp(plan) if plan.gpus else plan.tp
    return make_receipt(KIND, summary, base=installed_base(), tp=tp, machine=machine, versions=versions,
                        qualify_schema=SCHEMA, steps=[asdict(r) for r in results], topology=topo.to_dict(),
                        options=plan.options, checkout=str(plan.checkout) if plan.checkout else None,
                        eagle3_config=_eagle3_record(plan), interrupted=interrupted,
                        complete=interrupted is None, pack=str(plan.pack) if plan.pack else None,
                        warnings=plan.warnings)


def _eagle3_record(plan: Plan) -> dict[str, Any] | None:
    e = plan.eagle3
    if e is None:
        return None
    return {"source": e.why, "path": str(e.config_path), "derived": e.derived, "tp": e.tp, "name": e.name,
            "model": {"target": e.raw["model"].get("target"), "draft": e.raw["model"].get("draft")}}


def write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name("." + path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def _pack_filter(ti: tarfile.TarInfo) -> tarfile.TarInfo | None:
    import fnmatch

    name = Path(ti.name).name
    if fnmatch.fnmatch(name, "*-TP-[1-9]*.trace.json*") or (name.startswith(".") and name.endswith(".tmp")):
        return None  # rank > 0 profiler traces (rank 0's is enough, as on the lab) and unfinished writes
    return ti


def pack(out: Path, dest: Path) -> Path:
    """out/ as dest (tar.gz, top folder = out's name), written to a temporary name and renamed."""
    tmp = dest.with_name("." + dest.name + ".tmp")
    try:
        with tarfile.open(tmp, "w:gz") as tf:
            tf.add(out, arcname=out.name, filter=_pack_filter)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


# ---- TOML out (the rewritten bench eagle3 config) ----------------------------------------------------------------

def _toml_key(k: str) -> str:
    return k if k and all(c.isalnum() or c in "-_" for c in k) and k.isascii() else _toml_str(k)


def _toml_str(s: str) -> str:
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append({"\n": "\\n", "\t": "\\t", "\r": "\\r"}.get(ch, f"\\u{ord(ch):04x}"))
        else:
            out.append(ch)
    return '"' + "".join(out) + '"'


def _toml_value(v: Any, where: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if v != v or v in (float("inf"), float("-inf")):
            raise ValueError(f"{where}: {v} has no TOML form here")
        return repr(v)
    if isinstance(v, str):
        return _toml_str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x, where) for x in v) + "]"
    if isinstance(v, dict):
        return "{ " + ", ".join(f"{_toml_key(k)} = {_toml_value(x, where)}" for k, x in v.items()) + " }"
    raise ValueError(f"{where}: {type(v).__name__} has no TOML form")


def dump_toml(data: dict[str, Any]) -> str:
    """A parsed config back to TOML (tables as [a.b] sections); checked by parsing it back."""
    lines: list[str] = ["# written by sglang-blackwell qualify"]

    def table(d: dict[str, Any], path: list[str]) -> None:
        if path:
            lines.extend(["", "[" + ".".join(_toml_key(p) for p in path) + "]"])
        for k, v in d.items():
            if not isinstance(v, dict):
                lines.append(f"{_toml_key(k)} = {_toml_value(v, '.'.join([*path, k]))}")
        for k, v in d.items():
            if isinstance(v, dict):
                table(v, [*path, k])

    table(data, [])
    text = "\n".join(lines) + "\n"
    from .bench.config import tomllib

    if tomllib.loads(text) != data:
        raise ValueError("TOML round trip changed the config")
    return text


# ---- the command -------------------------------------------------------------------------------------------------

def _step_versions(plan: Plan, results: list[StepResult]) -> dict[str, Any] | None:
    """The stack versions a step recorded in its receipt (doctor's first: it has the driver too; same keys as
    receipts.collect_versions), so this process need not import torch to say them again."""
    for r in sorted((r for r in results if r.receipt), key=lambda r: r.step != "doctor"):
        v = (_read_json(plan.out / r.receipt) or {}).get("versions")
        if isinstance(v, dict) and any(v.values()):
            return v
    return None


def format_table(results: list[StepResult]) -> str:
    w = max(len(s) for s in STEPS)
    lines = []
    for r in results:
        t = f"{r.wall_s:7.0f} s" if r.wall_s is not None else " " * 9
        lines.append(f"  {r.step.ljust(w)}  {r.verdict.upper():7s} {t}  {r.receipt or '-'}"
                     + (f"\n  {' ' * w}  {r.reason}" if r.reason else ""))
    return "\n".join(lines)


def run(a: argparse.Namespace) -> int:
    from .bench.server import signals_as_interrupt
    from .receipts import collect_versions, write_receipt

    t0 = time.monotonic()

    def progress(msg: str) -> None:
        print(f"qualify [{time.monotonic() - t0:6.0f}s] {msg}", file=sys.stderr, flush=True)

    plan = make_plan(a)  # every input checked: nothing written before this returns
    plan.progress = progress
    plan.out.mkdir(parents=True, exist_ok=True)
    topo = plan.topology
    progress(f"{topo.summary()}; steps: "
             + ", ".join(s + (" (--skip)" if s in plan.skip else "") for s in STEPS) + f"; out {plan.out}")
    for w in plan.warnings:
        progress(f"warning: {w}")
    with signals_as_interrupt():
        results, interrupted = run_steps(plan, progress)
        versions = _step_versions(plan, results) or collect_versions()
        receipt = build_receipt(plan, results, interrupted=interrupted, versions=versions)
        path = write_receipt(receipt, plan.out / RECEIPT_NAME)
        packed = None
        if plan.pack:
            packed = pack(plan.out, plan.pack)
    print(f"qualify: {receipt['summary']['machine']}: {receipt['summary']['status'].upper()}")
    print(format_table(results))
    print(f"receipt: {path}")
    if packed:
        print(f"pack: {packed} ({packed.stat().st_size / 2**20:.2f} MiB): send this file back")
    if interrupted:
        return 130
    return 1 if receipt["summary"]["failed"] else 0
