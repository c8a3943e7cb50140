"""docker/Dockerfile built for real (docker/standin-image.sh: buildah, chroot isolation) on a Debian stand-in for
the CUDA base image, with the CUDA wheels skipped, then run: the image's configuration against the Dockerfile,
its labels against the build manifest inside it, and a container of it as the image's own user (uid 10001): the
entrypoint, `doctor --json`, `image verify`, the NCCL profile in a fresh interpreter, the /cache volume and the
HEALTHCHECK command.

What the stand-in cannot show: CUDA, a GPU, the digest-pinned nvidia/cuda image (not pulled), torch +cu130 and the
kernel wheel (skipped), sglang's other dependencies (our wheels go in with --no-deps, so the entrypoint stops at
sglang's first third-party import instead of printing its help), FlashInfer's AOT modules (no nvcc in it).
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import threading
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sglang_blackwell.artifacts.build import build
from sglang_blackwell.box.doctor import validate_doctor
from sglang_blackwell.box.nccl import KILL_SWITCH, load_profiles
from sglang_blackwell.patchset.bases import get_base
from sglang_blackwell.release.dockerfile import load_dockerfile, logical_lines
from sglang_blackwell.release.image import LABEL_NS, image_labels
from support.wheel_check import installer_problems

pytestmark = pytest.mark.image

REPO = Path(__file__).resolve().parents[2]
DIST = "/opt/sglang-blackwell/dist"
VENV_PY = "/opt/venv/bin/python"
ENV_DUMP = "import json, os; print(json.dumps({k: v for k, v in os.environ.items() if k.startswith('NCCL_')}))"


def image_base():
    """The base line the image was built for: docker/standin-image.sh's BASE (`make image-test BASE=0.5.9`; the
    environment reaches the script unchanged), else the Dockerfile's ARG BASE, which is the default base."""
    return get_base(os.environ.get("BASE") or None)


@pytest.fixture(scope="module")
def config(built) -> dict:
    return built.buildah.image_config(built.tag)


@pytest.fixture(scope="module")
def ctr(built):
    c = built.buildah.container(built.tag)
    yield c
    c.remove()


@pytest.fixture(scope="module")
def image_dist(ctr, tmp_path_factory) -> Path:
    """/opt/sglang-blackwell/dist of the image (wheels, build manifest, labels.txt), copied out."""
    return ctr.copy_out(DIST, tmp_path_factory.mktemp("image-dist") / "dist")


def runtime_instructions() -> dict[str, str]:
    """The runtime stage's instructions of docker/Dockerfile: keyword -> its argument text (the last one wins)."""
    lines = logical_lines((REPO / "docker" / "Dockerfile").read_text())
    start = next(i for i, ln in enumerate(lines) if ln.upper().startswith("FROM ") and ln.endswith(" AS runtime"))
    out = {}
    for ln in lines[start + 1:]:
        word, _, rest = ln.partition(" ")
        out[word.upper()] = rest.strip()
    return out


def ok(r) -> str:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    return r.stdout


def test_the_configuration_is_the_dockerfiles(config):
    df = runtime_instructions()
    assert config["Entrypoint"] == json.loads(df["ENTRYPOINT"]) == ["python", "-m", "sglang.launch_server"]
    assert config["Cmd"] == json.loads(df["CMD"])
    assert config["User"] == df["USER"] == "10001:10001"
    assert list(config["Volumes"]) == json.loads(df["VOLUME"]) == ["/cache"]
    assert list(config["ExposedPorts"]) == [f"{df['EXPOSE']}/tcp"]
    assert config["WorkingDir"] == df["WORKDIR"]
    hc = config["Healthcheck"]
    assert hc["Test"] == ["CMD", *json.loads(df["HEALTHCHECK"].split(" CMD ", 1)[1])]
    assert (hc["StartPeriod"], hc["Retries"]) == (1800 * 10**9, 3)
    env = dict(e.split("=", 1) for e in config["Env"])
    assert env["PATH"].startswith("/opt/venv/bin:") and env["VIRTUAL_ENV"] == "/opt/venv"
    assert env["HF_HOME"] == "/cache/huggingface" and env["XDG_CACHE_HOME"] == "/cache"
    assert env["TVM_FFI_CACHE_DIR"] == "/cache/tvm-ffi"  # sglang's tvm-ffi JIT kernels (MLA's KV store)


def test_labels_are_the_build_manifests(built, config, image_dist):
    """release.yml's way: the manifest stage's labels.txt labels the runtime build; they must equal what
    `image labels` makes of the manifest inside the image (its sha256 included)."""
    base = image_base()
    labels = config["Labels"]
    from_manifest = image_labels(base, image_dist)
    assert from_manifest[f"{LABEL_NS}.manifest-sha256"] == hashlib.sha256(
        (image_dist / f"manifest-{base.name}.json").read_bytes()).hexdigest()
    assert {k: labels.get(k) for k in from_manifest} == from_manifest
    assert (built.manifest_stage / "labels.txt").read_text() == (image_dist / "labels.txt").read_text()
    ours = {k for k in labels if k.startswith(LABEL_NS)}
    df = load_dockerfile(REPO)
    assert ours - set(from_manifest) == {f"{LABEL_NS}.cuda-archs", f"{LABEL_NS}.nccl-profile",
                                         f"{LABEL_NS}.standin-base"}
    assert labels[f"{LABEL_NS}.nccl-profile"] == df.arg("NCCL_PROFILE")
    assert labels[f"{LABEL_NS}.cuda-archs"] == ""  # the stand-in build: no AOT modules
    assert labels[f"{LABEL_NS}.standin-base"] == "debian:bookworm"


def test_the_image_carries_the_wheels_make_builds(image_dist, tmp_path):
    """Byte for byte: the builder stage's wheels are the ones `sglang-blackwell build` makes on the host for the
    image's Python, and an independent reader (PyPA's installer) accepts their RECORD. For the image's Python: a
    base that pins an sglang wheel per CPython (0.5.14, the default, and 0.5.23) builds one per pinned Python when
    none is named, the image only its own."""
    base = image_base()
    manifest = json.loads((image_dist / f"manifest-{base.name}.json").read_text())
    assert manifest["base"] == base.name and manifest["python"] == "3.11"  # Debian bookworm's python3
    here, _ = build(base, tmp_path / "dist", python=manifest["python"])
    want = {w.path.name: hashlib.sha256(w.path.read_bytes()).hexdigest() for w in here}
    in_image = {w["output"]["filename"]: w["output"]["sha256"] for p in manifest["packages"] for w in p["wheels"]}
    assert in_image == want
    for name, digest in in_image.items():
        assert hashlib.sha256((image_dist / name).read_bytes()).hexdigest() == digest
        assert installer_problems(image_dist / name) == []


def test_runs_as_uid_10001_with_a_writable_cache(ctr):
    assert ok(ctr.run("id", "-u")).strip() == "10001" and ok(ctr.run("id", "-g")).strip() == "10001"
    assert ok(ctr.run("stat", "-c", "%u:%g %a", "/cache")).split() == ["10001:10001", "755"]
    ok(ctr.run("sh", "-c", "mkdir -p /cache/huggingface && touch /cache/huggingface/probe"))
    assert ok(ctr.run("sh", "-c", 'echo "$HOME"; pwd')).split() == ["/home/sglang", "/home/sglang"]
    r = ctr.run("touch", "/opt/venv/probe")  # the environment is root's: the server cannot change it
    assert r.returncode != 0 and "Permission denied" in r.stderr


def test_the_entrypoint_reaches_the_patched_sglang(config, ctr, image_dist):
    """The image's ENTRYPOINT + CMD as a runtime runs them. The stand-in has none of sglang's dependencies (CUDA
    wheels skipped, --no-deps), so instead of the help it must stop at a module sglang declares as a requirement,
    raised from the patched sglang in /opt/venv, not at anything of ours."""
    r = ctr.run(*config["Entrypoint"], *config["Cmd"])
    assert r.returncode == 1, r.stdout + r.stderr
    frames = [ln.strip() for ln in r.stderr.splitlines() if ln.strip().startswith('File "')]
    assert frames[0].startswith('File "<frozen runpy>"')  # python -m sglang.launch_server
    assert frames[-1].startswith('File "/opt/venv/lib/python3.11/site-packages/sglang/'), frames
    missing = r.stderr.rsplit("ModuleNotFoundError: No module named '", 1)[1].split("'")[0].split(".")[0]
    reqs = json.loads(ok(ctr.run("python", "-c", "import importlib.metadata as m, json; "
                                                 "print(json.dumps(m.requires('sglang')))")))
    declared = {canonicalize_name(Requirement(q).name) for q in reqs}
    dist = {"PIL": "pillow", "zmq": "pyzmq", "yaml": "pyyaml"}.get(missing, missing)  # import name -> distribution
    assert canonicalize_name(dist) in declared, (missing, sorted(declared))
    base = image_base()
    marker = json.loads(ok(ctr.run("python", "-c", "import importlib.metadata as m; "
                                                   "print(m.distribution('sglang').read_text('sglang_blackwell.json'))")))
    assert marker["series_sha256"] == next(p["series_sha256"] for p in json.loads(
        (image_dist / f"manifest-{base.name}.json").read_text())["packages"] if p["distribution"] == "sglang")
    assert "usage: sglang-blackwell" in ok(ctr.run("sglang-blackwell", "--help"))


def test_image_verify_as_the_images_user(ctr):
    base = image_base()
    out = ok(ctr.run("sglang-blackwell", "image", "verify", "--base", base.name, "--dist", DIST, "--python",
                     VENV_PY, "--nccl-profile", load_dockerfile(REPO).arg("NCCL_PROFILE"), "--skip-cuda-wheels"))
    assert f"image verify {VENV_PY}: OK (base {base.name}" in out


def test_doctor_json(ctr, image_dist):
    r = ctr.run("sglang-blackwell", "doctor", "--json")
    assert r.returncode == 1, r.stderr  # not ready to serve: the build container has no GPU (and no torch)
    receipt = json.loads(r.stdout)
    assert validate_doctor(receipt) == []
    checks = {c["id"]: c for c in receipt["checks"]}
    manifest = json.loads((image_dist / f"manifest-{image_base().name}.json").read_text())
    assert checks["fork_builds"]["status"] == "ok"
    for p in manifest["packages"]:
        assert f"{p['distribution']} {p['local_version']}: this fork" in checks["fork_builds"]["detail"]
    assert checks["gpus"]["status"] == "fail" and checks["torch"]["status"] == "fail"  # no GPU, torch skipped
    assert receipt["summary"]["status"] == "fail" and set(receipt["summary"]["failing"]) == {"gpus", "torch"}
    profile = load_dockerfile(REPO).arg("NCCL_PROFILE")
    assert f"managed block: profile {profile} via pth" in checks["nccl_env"]["detail"]  # Debian's sitecustomize


def test_the_nccl_profile_reaches_a_fresh_interpreter(config, ctr):
    profile = load_profiles()[config["Labels"][f"{LABEL_NS}.nccl-profile"]]
    assert json.loads(ok(ctr.run("python", "-c", ENV_DUMP))) == profile.env
    # the user wins: a value set with -e stays; the kill switch turns the whole block off
    key = next(iter(profile.env))
    got = json.loads(ok(ctr.run("python", "-c", ENV_DUMP, env={key: "user-value"})))
    assert got == {**profile.env, key: "user-value"}
    assert json.loads(ok(ctr.run("python", "-c", ENV_DUMP, env={KILL_SWITCH: "0"}))) == {}


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_the_healthcheck_command(config, ctr):
    """The HEALTHCHECK's own command in the image: exit 0 against a /health that answers 200 (a server on this
    machine's loopback: chroot isolation shares the host's network), non-zero where nothing listens."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        cmd = config["Healthcheck"]["Test"][1:]
        port = srv.server_address[1]
        assert ctr.run(*cmd, env={"SGLANG_BLACKWELL_HEALTH_URL": f"http://127.0.0.1:{port}/health"},
                       timeout=60).returncode == 0
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            closed = s.getsockname()[1]
        assert ctr.run(*cmd, env={"SGLANG_BLACKWELL_HEALTH_URL": f"http://127.0.0.1:{closed}/health"},
                       timeout=60).returncode != 0
    finally:
        srv.shutdown()


def test_the_stand_in_is_debian_bookworm(ctr):
    osr = dict(ln.split("=", 1) for ln in ok(ctr.run("cat", "/etc/os-release")).splitlines() if "=" in ln)
    assert osr["ID"] == "debian" and osr["VERSION_CODENAME"] == "bookworm"
    assert ok(ctr.run(VENV_PY, "-c", "import sys; print(sys._base_executable)")).strip() == "/usr/bin/python3.11"


def test_the_build_context_stays_in_the_builder_stage(ctr):
    assert ctr.run("test", "-e", "/src").returncode == 1
    assert ok(ctr.run("ls", "/opt/sglang-blackwell")).split() == ["dist"]
