"""Run a probe script against chosen upstream trees in a fresh interpreter state (module-level state of the code
under test, e.g. `_is_sm120_supported`, is computed at import time, so every scenario needs its own process).

The probe prints one JSON object on its last stdout line; `run_probe` returns it.

How a probe process starts. Most of a probe's cost is importing what sglang imports (torch, transformers, openai,
sympy, ...: ~10 s of CPU on a CI core, sglang's own modules ~1 s). So a zygote process imports those third-party
modules once per test session (never sglang or flashinfer: they come from the trees) and forks a child per probe.
The child takes the probe's environment and puts the probe's trees first on sys.path, exactly where PYTHONPATH
would put them, then runs the code as `python -c` would (`__main__`). A preload that reads a variable at import
time (IMPORT_TIME_ENV: TRITON_INTERPRET) is imported as that variable says, so there is one zygote per value the
probes give those variables, started with them in its environment: a TRITON_INTERPRET=1 probe forks from a zygote
whose `import triton` was interpreted. `SGLB_PROBE_ZYGOTE=0` gives every probe a fresh interpreter instead.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
SHIMS = SUPPORT / "shims"
ZYGOTE_ENV = "SGLB_PROBE_ZYGOTE"

# What sglang 0.5.x imports from third parties at `import sglang.srt...` time, heaviest first (python -X importtime
# on the CPU test environment). Missing ones are skipped. Never sglang, flashinfer, sgl_kernel or support.*.
PRELOAD = ("torch", "torch.distributed", "torch.multiprocessing", "torch._dynamo", "torch._inductor.compile_fx",
           "torch.export", "torch.distributed.fsdp", "transformers", "transformers.masking_utils",
           "transformers.modeling_utils", "transformers.configuration_utils", "transformers.modeling_layers",
           "transformers.processing_utils", "transformers.models.llama", "openai", "openai.types.responses",
           "sympy", "networkx", "triton", "numpy", "aiohttp", "aiohttp.client", "httpx", "requests",
           "huggingface_hub", "compressed_tensors", "IPython", "safetensors", "psutil", "zmq", "orjson", "PIL",
           "einops", "gguf", "pynvml", "msgspec", "partial_json_parser", "jinja2", "sentencepiece", "pydantic")

ZYGOTE = r'''
import importlib, json, os, sys, traceback, warnings
proto_in = os.fdopen(os.dup(0), "r")
proto_out = os.fdopen(os.dup(1), "w", buffering=1)
devnull = os.open(os.devnull, os.O_RDWR)
os.dup2(devnull, 0); os.dup2(devnull, 1)  # stray output of the preloads must not reach the protocol
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for m in PRELOAD:
        try:
            importlib.import_module(m)
        except Exception:
            pass
base_path = list(sys.path)
proto_out.write(json.dumps({"ready": len(sys.modules)}) + "\n")
for line in proto_in:
    req = json.loads(line)
    sys.stdout.flush(); sys.stderr.flush()
    pid = os.fork()
    if pid == 0:
        rc = 1
        try:
            os.setsid()
            proto_in.close(); proto_out.close()
            out = os.open(req["stdout"], os.O_WRONLY | os.O_TRUNC)
            err = os.open(req["stderr"], os.O_WRONLY | os.O_TRUNC)
            os.dup2(out, 1); os.dup2(err, 2); os.close(out); os.close(err)
            os.environ.clear(); os.environ.update(req["env"])
            import tempfile; tempfile.tempdir = None  # the probe's own TMPDIR (run_probe), not the zygote's
            sys.path[:] = [""] + req["trees"] + base_path[1:]
            importlib.invalidate_caches()
            sys.argv = ["-c"]
            main = type(sys)("__main__")
            sys.modules["__main__"] = main
            try:
                exec(compile(req["code"], "<string>", "exec"), main.__dict__)
                rc = 0
            except SystemExit as e:
                if e.code is None or isinstance(e.code, int):
                    rc = e.code or 0
                else:
                    print(e.code, file=sys.stderr); rc = 1
            except BaseException:
                traceback.print_exc(); rc = 1
        finally:
            try:
                sys.stdout.flush(); sys.stderr.flush()
            finally:
                os._exit(rc)
    proto_out.write(json.dumps({"pid": pid}) + "\n")
    _, status = os.waitpid(pid, 0)
    proto_out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
'''


def _env(trees: list[Path], env: dict[str, str] | None) -> dict[str, str]:
    # the CPU test environment has neither torchvision nor sgl_kernel: import-only stand-ins (shims/)
    path = [str(t) for t in trees] + [str(SUPPORT.parent), str(SHIMS)]
    full_env = dict(os.environ)
    full_env.pop("PYTHONDONTWRITEBYTECODE", None)  # trees are private: compile each module once per session
    full_env.update(env or {})
    full_env["PYTHONPATH"] = os.pathsep.join(path)
    full_env.setdefault("SGLANG_BLACKWELL_TEST", "1")
    return full_env


# variables a preloaded module reads when it is imported, so a probe forks from a zygote that imported it with the
# probe's values (`_zygote`): TRITON_INTERPRET decides at `import triton` whether triton.language's own @jit helpers
# (tl.cdiv, ...) are interpreted, and an interpreted kernel cannot call a compiled helper
IMPORT_TIME_ENV = ("TRITON_INTERPRET",)


def _import_time_key(env: dict[str, str]) -> tuple[str | None, ...]:
    """The values (None: unset) a probe process with environment `env` gives IMPORT_TIME_ENV: its zygote's key."""
    return tuple(env.get(k) for k in IMPORT_TIME_ENV)


def run_probe(trees: list[Path], code: str, *, env: dict[str, str] | None = None, timeout: int = 240) -> dict:
    """Run `code` against `trees` (module docstring); what the probe writes through tempfile (a scenario's model
    directory, zmq's IPC paths) goes to a TMPDIR of its own, removed when it ends."""
    full_env = _env(trees, env)
    code = textwrap.dedent(code)
    fresh = os.environ.get(ZYGOTE_ENV, "1") == "0"
    zygote = None if fresh else _zygote(_import_time_key(full_env))
    scratch = tempfile.mkdtemp(prefix="sglb-probe-tmp-")
    full_env["TMPDIR"] = scratch
    try:
        if zygote is not None:
            rc, stdout, stderr = zygote.run([str(t) for t in trees], code, full_env, timeout)
        else:
            r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full_env,
                               timeout=timeout)
            rc, stdout, stderr = r.returncode, r.stdout, r.stderr
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    lines = [ln for ln in stdout.strip().splitlines() if ln.startswith("{")]
    if rc != 0 or not lines:
        raise ProbeError(f"probe exited {rc}\n--- stdout\n{stdout[-3000:]}\n--- stderr\n{stderr[-6000:]}")
    return json.loads(lines[-1])


class ProbeError(RuntimeError):
    pass


class _Zygote:
    def __init__(self, argv: list[str] | None = None, key: tuple[str | None, ...] | None = None) -> None:
        """Start the zygote (argv: another program speaking its protocol, for the reader's test) with the
        IMPORT_TIME_ENV values `key` (None: this process's) in its environment from its first line on, so its
        preloads are imported as a probe with those values would import them."""
        env = _env([], None)
        for k, v in zip(IMPORT_TIME_ENV, key, strict=True) if key is not None else ():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        argv = argv or [sys.executable, "-c", f"PRELOAD = {PRELOAD!r}\n" + ZYGOTE]
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, env=env, bufsize=0)
        self.dir = tempfile.mkdtemp(prefix="sglb-probe-")
        self._buf = b""
        ready = self._read(300)
        if "ready" not in ready:
            raise ProbeError(f"probe zygote did not start: {ready}")

    def _read(self, timeout: float) -> dict:
        """The zygote's next protocol line. Read from the pipe's fd into a buffer of our own: select() on a
        buffered file object misses lines already read into its buffer (a probe that ends at once writes "pid"
        and "rc" together: a readline() took both, and select() then waited for the "rc" it already had)."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + max(timeout, 0)
        while b"\n" not in self._buf:
            r, _, _ = select.select([self.proc.stdout], [], [], max(deadline - time.monotonic(), 0))
            if not r:
                raise TimeoutError
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                raise ProbeError(f"probe zygote exited ({self.proc.poll()})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return json.loads(line)

    def run(self, trees: list[str], code: str, env: dict[str, str], timeout: float) -> tuple[int, str, str]:
        out, err = Path(self.dir, "stdout"), Path(self.dir, "stderr")
        out.write_bytes(b"")
        err.write_bytes(b"")
        assert self.proc.stdin is not None
        self.proc.stdin.write((json.dumps({"trees": trees, "code": code, "env": env, "stdout": str(out),
                                           "stderr": str(err)}) + "\n").encode())
        self.proc.stdin.flush()
        deadline = time.monotonic() + timeout
        pid = self._read(30)["pid"]
        try:
            rc = self._read(deadline - time.monotonic())["rc"]
        except TimeoutError:
            os.killpg(pid, signal.SIGKILL)  # the probe and the TP ranks it started (its own session)
            self._read(30)
            raise subprocess.TimeoutExpired(["probe", *trees], timeout) from None
        return rc, out.read_text(errors="replace"), err.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


_zygotes: dict[tuple[str | None, ...], _Zygote] = {}


def _zygote(key: tuple[str | None, ...]) -> _Zygote:
    """The zygote for the IMPORT_TIME_ENV values `key`, started when first asked for (or after it died)."""
    z = _zygotes.get(key)
    if z is None or z.proc.poll() is not None:
        z = _zygotes[key] = _Zygote(key=key)
        atexit.register(z.close)
    return z
