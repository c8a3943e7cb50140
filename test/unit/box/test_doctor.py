"""`sglang-blackwell doctor`: runs for real on this CPU-only machine (no GPU: not ready, exit 1), keeps a
stable JSON schema, and gives each failing item a fix. GPU boxes are simulated (Topology.simulated or
SGLANG_BLACKWELL_TOPOLOGY, said in every output); installed packages are real files: our wheels' dist-info
marker, a kernel package holding an nvcc-compiled .so, and the pinned upstream flashinfer wheel."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from pyenvs import clean_env, cli, make_venv

from sglang_blackwell.box.doctor import SCHEMA, run_doctor, to_receipt, validate_doctor
from sglang_blackwell.box.doctor_check import CHECK_IDS, CHECK_KEYS, Context
from sglang_blackwell.box.doctor_stack import check_kernel_sass
from sglang_blackwell.box.hazards import acs_facts, iommu_facts, parse_lspci_acs, upstream_bridges
from sglang_blackwell.box.stackinfo import arch_covered, trtllm_comm_probe
from sglang_blackwell.box.topology import Topology
from sglang_blackwell.receipts import ENVELOPE_KEYS


def _no_gpu_here() -> bool:
    from sglang_blackwell.box.topology import detect

    return detect(cuda=False, environ={}).gpu_count == 0


def doctor_json(*args: str, env: dict[str, str] | None = None) -> tuple[dict, subprocess.CompletedProcess]:
    r = cli("doctor", "--json", *args, env=env, check=False)
    return json.loads(r.stdout), r


def checks_for(topo: Topology, python: str | None = None) -> tuple[dict, dict[str, dict]]:
    """The doctor in this process on a simulated topology: (receipt, {id: check})."""
    rec = json.loads(json.dumps(to_receipt(run_doctor(topology=topo, python=python)), default=str))
    return rec, {c["id"]: c for c in rec["checks"]}


def sim(tmp_path: Path, topo: Topology, name: str = "box.json") -> dict[str, str]:
    f = tmp_path / name
    f.write_text(json.dumps(topo.to_dict()))
    return clean_env(SGLANG_BLACKWELL_TOPOLOGY=str(f))


GPU_ONLY_ITEMS = ("driver", "p2p", "multicast", "links", "iommu", "acs", "allreduce_paths", "kernel_sass",
                  "flashinfer_trtllm_comm")


@pytest.mark.skipif(not _no_gpu_here(), reason="this machine has GPUs: CPU-only behaviour cannot be shown")
def test_a_machine_without_gpu_or_stack_is_not_ready(tmp_path):
    """Issue 24 item 6: on this CPU machine (no GPU, no sglang / flashinfer-python) doctor does not say ok: the gpus
    and fork_builds items fail, `overall: not ready`, exit 1, the receipt says the same; the gpus item names what
    was asked (nvidia-smi, /proc/driver/nvidia, torch.cuda, NVML), and no Python package is blamed for the GPU."""
    from sglang_blackwell.box.stackinfo import dist_facts

    assert dist_facts("sglang") is None and dist_facts("flashinfer-python") is None, "needs a machine without the stack"
    out = tmp_path / "doctor.json"
    rec, r = doctor_json("--out", str(out))
    assert r.returncode == 1, r.stderr
    assert validate_doctor(rec) == []
    assert json.loads(out.read_text())["checks"] == rec["checks"]
    assert rec["summary"]["gpus"] == 0 and rec["summary"]["topology_class"] == "no-gpu"
    assert rec["summary"]["status"] == "fail" and {"gpus", "fork_builds"} <= set(rec["summary"]["failing"])
    c = {c["id"]: c for c in rec["checks"]}
    for gpu_item in GPU_ONLY_ITEMS:
        assert c[gpu_item]["status"] == "n/a", (gpu_item, c[gpu_item])
    gpus = c["gpus"]
    assert gpus["status"] == "fail" and gpus["detail"].startswith("no NVIDIA GPU: nvidia-smi"), gpus
    for asked in ("nvidia-smi", "/proc/driver/nvidia", "torch.cuda", "NVML"):
        assert asked in gpus["detail"], asked
    assert "pip install" not in gpus["detail"] and "nvidia-ml-py" not in gpus["fix"], "no package is the cause"
    assert set(gpus["data"]["sightings"]) == {"nvidia_smi", "proc_driver", "torch_cuda", "nvml_module"}
    text = cli("doctor", check=False)
    assert text.returncode == 1
    last = text.stdout.strip().splitlines()[-1]
    failing = rec["summary"]["failing"]
    assert last == f"overall: not ready ({len(failing)} failing: {', '.join(failing)})", last
    assert "no NVIDIA GPU on this machine" in text.stdout and "overall: ok" not in text.stdout


def _env_without_nvml(tmp_path: Path, smi_gpus: int | None) -> tuple[Path, dict[str, str]]:
    """A real venv without nvidia-ml-py or torch (the CLI's one dependency, packaging, on PYTHONPATH) and a PATH
    whose nvidia-smi (a stand-in for a GPU box's: this machine has none) lists `smi_gpus` GPUs; None: no
    nvidia-smi on PATH at all."""
    import packaging

    py = make_venv(tmp_path / "venv")
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "packaging").symlink_to(Path(packaging.__file__).parent)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    if smi_gpus is not None:
        smi = bin_dir / "nvidia-smi"
        smi.write_text("#!/bin/sh\n" + "".join(f'echo "GPU {i}: NVIDIA RTX PRO 6000 Blackwell Server Edition '
                                                f'(UUID: GPU-{i})"\n' for i in range(smi_gpus)))
        smi.chmod(0o755)
    from sglang_blackwell.paths import PACKAGE_DIR

    env = clean_env(PATH=f"{bin_dir}{os.pathsep}/usr/bin{os.pathsep}/bin",
                    PYTHONPATH=f"{PACKAGE_DIR.parent}{os.pathsep}{lib}")
    return py, env


@pytest.mark.skipif(not _no_gpu_here(), reason="this machine has GPUs: CPU-only behaviour cannot be shown")
def test_nvidia_ml_py_is_blamed_only_where_something_else_sees_a_gpu(tmp_path):
    """NVML cannot be asked (no nvidia-ml-py): where nvidia-smi lists GPUs, that is the failing cause and its fix;
    where nothing sees a GPU, the item says "no NVIDIA GPU" and the missing package is a side note, not the fix."""
    for smi_gpus in (2, None):
        py, env = _env_without_nvml(tmp_path / str(smi_gpus), smi_gpus)
        r = subprocess.run([str(py), "-m", "sglang_blackwell.cli", "doctor", "--json"], capture_output=True,
                           text=True, env=env, timeout=120)
        assert r.returncode == 1, r.stderr
        gpus = {c["id"]: c for c in json.loads(r.stdout)["checks"]}["gpus"]
        assert gpus["status"] == "fail" and gpus["data"]["sightings"]["nvml_module"] is False
        if smi_gpus:
            assert "nvidia-smi -L lists 2 GPU(s)" in gpus["detail"]
            assert "nvidia-ml-py is not installed" in gpus["detail"]
            assert gpus["fix"].startswith("pip install nvidia-ml-py into this environment"), gpus
        else:
            assert gpus["detail"].startswith("no NVIDIA GPU: nvidia-smi: not on PATH"), gpus
            assert "NVML: not asked (nvidia-ml-py not installed)" in gpus["detail"]
            assert "nvidia-ml-py" not in gpus["fix"], gpus
        text = subprocess.run([str(py), "-m", "sglang_blackwell.cli", "doctor"], capture_output=True, text=True,
                              env=env, timeout=120).stdout
        head = text.splitlines()[0]
        assert head == ("sglang-blackwell doctor: NVML sees no GPU, but nvidia-smi sees 2 (the gpus item says why)"
                        if smi_gpus else "sglang-blackwell doctor: no NVIDIA GPU on this machine (the gpus item says "
                                         "what was asked)"), head


def test_schema_is_stable(tmp_path):
    rec, _ = doctor_json(env=sim(tmp_path, Topology.simulated(8)))
    assert tuple(rec)[:len(ENVELOPE_KEYS)] == ENVELOPE_KEYS
    assert rec["kind"] == "doctor" and rec["doctor_schema"] == SCHEMA
    assert [c["id"] for c in rec["checks"]] == list(CHECK_IDS)
    assert all(tuple(c) == CHECK_KEYS for c in rec["checks"])
    assert validate_doctor(rec) == []
    broken = json.loads(json.dumps(rec))
    broken["checks"].pop(3)
    broken["checks"][0]["status"] = "fail"
    broken["checks"][0]["fix"] = None
    del broken["summary"]["failing"]
    probs = validate_doctor(broken)
    assert any("check ids" in p for p in probs) and any("without a fix" in p for p in probs)
    assert any("'failing'" in p for p in probs)


def test_simulated_pcie_box_flags_missing_profile_then_install_clears_it(tmp_path):
    box = Topology.simulated(8, "12.0", kind="SYS", atomics=False, multicast=False)
    env = sim(tmp_path, box)
    venv = make_venv(tmp_path / "venv")
    rec, c = checks_for(box, str(venv))
    assert rec["machine"]["gpu_count"] == 8 and "[simulated]" in c["gpus"]["detail"], "simulation is said"
    assert c["nccl_env"]["status"] == "warn" and "nccl install" in c["nccl_env"]["fix"]
    assert c["p2p"]["status"] == "ok" and "native atomics: none" in c["p2p"]["detail"]
    assert c["iommu"]["status"] == "n/a" and "simulated" in c["iommu"]["detail"]
    assert "42 KiB: nccl" in c["allreduce_paths"]["detail"]
    assert validate_doctor(rec) == []

    cli("nccl", "install", "--python", str(venv), env=env)  # auto, resolved against the simulated box
    rec, c = checks_for(box, str(venv))
    assert c["nccl_env"]["status"] == "ok", c["nccl_env"]
    assert "profile pcie-ll" in c["nccl_env"]["detail"]
    assert "NCCL_PROTO=LL (sitecustomize)" in c["nccl_env"]["detail"]

    # the same environment on an NVLink box: the recorded resolution no longer matches the hardware
    rec, c = checks_for(Topology.simulated(2, "9.0", kind="NV18"), str(venv))
    assert c["nccl_env"]["status"] == "warn" and "no longer matches the hardware" in c["nccl_env"]["detail"]
    assert c["nccl_env"]["fix"].startswith("sglang-blackwell nccl install --profile auto")


def test_nccl_env_reads_the_nccl_config_files_by_the_environments_nccl(tmp_path, monkeypatch):
    """NCCL-config mode and a user's own NCCL_CONF_FILE, read by the rules of the environment's NCCL wheel
    (a dist-info of nvidia-nccl-cu13 2.28.9 in the venv: getline, the CR of a CRLF line stays)."""
    box = Topology.simulated(8, "12.0", kind="SYS")
    venv = make_venv(tmp_path / "venv")
    site = next((tmp_path / "venv" / "lib").glob("python3*/site-packages"))
    _fake_dist(site, "nvidia-nccl-cu13", "2.28.9")
    ours = tmp_path / "nccl.conf"
    monkeypatch.delenv("NCCL_CONF_FILE", raising=False)
    cli("nccl", "install", "--python", str(venv), "--nccl-conf", str(ours), env=sim(tmp_path, box))
    _, c = checks_for(box, str(venv))
    n = c["nccl_env"]
    assert n["status"] == "warn" and "NCCL_CONF_FILE is not set here" in n["detail"], n
    assert n["fix"].startswith(f"set NCCL_CONF_FILE={ours} for every process")
    assert n["data"]["nccl_conf"]["rules"]["label"] == "NCCL 2.28.9"
    monkeypatch.setenv("NCCL_CONF_FILE", str(ours))
    _, c = checks_for(box, str(venv))
    assert c["nccl_env"]["status"] == "ok", c["nccl_env"]
    assert f"NCCL config file {ours}" in c["nccl_env"]["detail"]
    mine = tmp_path / "mine.conf"
    mine.write_bytes(b"NCCL_DEBUG=WARN\r\nNCCL_ALGO = Tree\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(mine))
    _, c = checks_for(box, str(venv))
    n = c["nccl_env"]
    assert n["status"] == "warn" and n["fix"].startswith("edit the lines named"), n
    assert f"{mine}: line 1: NCCL_DEBUG='WARN\\r': the value keeps its carriage return" in n["detail"]
    assert "line 2: NCCL sets 'NCCL_ALGO '" in n["detail"]
    assert "names another file" in n["data"]["nccl_conf"]["off"], "NCCL_CONF_FILE elsewhere: the profile is off"


def _fake_dist(site: Path, name: str, version: str, marker: dict | None = None) -> None:
    d = site / f"{name.replace('-', '_')}-{version}.dist-info"
    d.mkdir(parents=True)
    (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
    if marker is not None:
        (d / "sglang_blackwell.json").write_text(json.dumps(marker))


def test_fork_builds_read_from_dist_info_markers(tmp_path, monkeypatch):
    site = tmp_path / "site"
    _fake_dist(site, "sglang", "0.5.9+sm120.1", {"base": "0.5.9", "patches": [
        {"name": "0001-fusion-gate.patch", "logical_id": "P2"},
        {"name": "0002-symm-mem.patch", "logical_id": "P6"}]})
    _fake_dist(site, "flashinfer-python", "0.6.4")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))
    rec, checks = checks_for(Topology.simulated(8))
    c = checks["fork_builds"]
    assert "sglang 0.5.9+sm120.1: this fork (base 0.5.9, patches P2, P6)" in c["detail"]
    assert "flashinfer-python 0.6.4: upstream build" in c["detail"]
    assert c["status"] == "warn" and "sglang-blackwell install" in c["fix"]
    assert rec["versions"]["sglang"] == "0.5.9+sm120.1"


@pytest.fixture(scope="module")
def flashinfer_064(tmp_path_factory) -> Path:
    """The 0.5.9 line's pinned flashinfer-python 0.6.4 wheel (fetched, sha256-verified), unpacked."""
    pytest.importorskip("torch", reason="flashinfer imports torch (make test installs the CPU build)")
    from sglang_blackwell.patchset.bases import get_base
    from sglang_blackwell.patchset.fetch import fetch

    art = get_base("0.5.9").package("flashinfer").files[0]
    try:
        whl = fetch(art)
    except Exception as e:
        pytest.skip(f"cannot fetch {art.filename}: {e}")
    d = tmp_path_factory.mktemp("fi064")
    with zipfile.ZipFile(whl) as z:
        z.extractall(d)
    r = subprocess.run([sys.executable, "-c", "import flashinfer.jit.comm"],
                       env=dict(os.environ, PYTHONPATH=str(d)), capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"flashinfer 0.6.4 does not import here: {r.stderr.strip().splitlines()[-1:]}")
    return d


@pytest.mark.network
def test_trtllm_comm_probe_on_real_flashinfer(flashinfer_064, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(flashinfer_064))
    hopper = trtllm_comm_probe("9.0")
    assert hopper["importable"] and hopper["accepted"] is True and hopper["arch"] == "9.0a"
    blackwell = trtllm_comm_probe("12.0")
    assert blackwell["accepted"] is False and "No supported CUDA architectures" in blackwell["error"]
    assert blackwell["majors"] == [9, 10]


@pytest.mark.network
def test_doctor_flags_trtllm_comm_on_sm120(flashinfer_064, monkeypatch):
    monkeypatch.syspath_prepend(str(flashinfer_064))  # the dist-info, read by doctor without importing it
    monkeypatch.setenv("PYTHONPATH", str(flashinfer_064))  # the probe subprocess imports it
    _, c = checks_for(Topology.simulated(8, "12.0"))
    t = c["flashinfer_trtllm_comm"]
    assert t["status"] == "warn" and "rejected" in t["detail"] and "P1" in t["fix"]
    assert "rejects capability 12.0" in c["allreduce_paths"]["data"]["fusion"]["why"]


@pytest.mark.slow
def test_kernel_sass_check_on_a_compiled_kernel_package(tmp_path, monkeypatch):
    nvcc = shutil.which("nvcc") or next((p for p in ("/usr/local/cuda/bin/nvcc",) if Path(p).exists()), None)
    if nvcc is None:
        pytest.skip("nvcc not found: needs a real CUDA shared object")
    pkg = tmp_path / "site" / "sgl_kernel"
    (pkg / "sm100").mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise ImportError('doctor must not import the kernel package')\n")
    src = tmp_path / "k.cu"
    src.write_text("__global__ void k(float* x) { x[threadIdx.x] += 1.f; }\n")
    subprocess.run([nvcc, "-shared", "-Xcompiler", "-fPIC", "-gencode", "arch=compute_90a,code=sm_90a",
                    "-gencode", "arch=compute_120a,code=sm_120a", str(src), "-o",
                    str(pkg / "sm100" / "common_ops.abi3.so")], check=True, capture_output=True)
    _fake_dist(tmp_path / "site", "sgl-kernel", "0.3.21+cu130")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    for cap, status in (("12.0", "ok"), ("9.0", "ok"), ("8.9", "fail"), ("12.1", "fail")):
        k = check_kernel_sass(Context(Topology.simulated(2, cap, kind="PIX"), {}, None, None, None, None))
        k = {"status": k.status, "detail": k.detail, "fix": k.fix}
        assert k["status"] == status, (cap, k)
        assert "sgl-kernel 0.3.21+cu130" in k["detail"] and "sm_90a sm_120a" in k["detail"]
        if status == "fail":
            assert k["fix"]


def test_arch_covered():
    archs = ["sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]
    assert arch_covered(archs, 12, 0) and arch_covered(archs, 9, 0) and arch_covered(archs, 12, 1)
    assert not arch_covered(["sm_80", "sm_90"], 12, 0)
    assert not arch_covered(["sm_120a"], 12, 1)
    assert arch_covered(["compute_90"], 12, 0), "PTX JITs forward"


LSPCI = """\
0000:00:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge (prog-if 00)
\tControl: I/O+ Mem+ BusMaster+ SpecCycle- MemWINV- VGASnoop- ParErr- Stepping- SERR- FastB2B- DisINTx+
\tCapabilities: [2a0 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-
\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-

0000:01:00.0 PCI bridge: Broadcom / LSI PEX890xx PCIe Gen 5 Switch (rev b0) (prog-if 00 [Normal decode])
\tCapabilities: [1f0 v1] Access Control Services
\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl+ DirectTrans+
\t\tACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- EgressCtrl- DirectTrans-

0000:03:00.0 3D controller: NVIDIA Corporation Device 2bb5 (rev a1)
\tSubsystem: NVIDIA Corporation Device 204e
"""


def _fake_sysfs(root: Path) -> None:
    """A simulated /sys: GPU 0000:03:00.0 behind root port 00:01.1 -> switch 01:00.0 -> 02:00.0; IOMMU on."""
    dev = root / "sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0/0000:02:00.0/0000:03:00.0"
    dev.mkdir(parents=True)
    (dev / "iommu_group").mkdir()
    (dev / "iommu_group" / "type").write_text("DMA-FQ\n")
    (root / "sys/bus/pci/devices").mkdir(parents=True)
    (root / "sys/bus/pci/devices/0000:03:00.0").symlink_to(dev)
    (root / "sys/class/iommu/ivhd0").mkdir(parents=True)
    (root / "proc").mkdir()
    (root / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz root=/dev/sda1 amd_iommu=on quiet\n")


def test_platform_hazards_from_simulated_sysfs(tmp_path):
    _fake_sysfs(tmp_path)
    topo = Topology.simulated(1)
    topo.gpus[0].pci_bus_id = "0000:03:00.0"
    assert upstream_bridges("0000:03:00.0", tmp_path) == ["0000:00:01.1", "0000:01:00.0", "0000:02:00.0"]
    io = iommu_facts(topo, tmp_path)
    assert io["units"] == ["ivhd0"] and io["cmdline"] == ["amd_iommu=on"]
    assert io["gpu_domain_types"] == {"0000:03:00.0": "DMA-FQ"}
    devs = parse_lspci_acs(LSPCI)
    assert devs["0000:00:01.1"]["acs_ctl"]["ReqRedir"] is True
    assert devs["0000:01:00.0"]["acs_ctl"]["ReqRedir"] is False
    assert devs["0000:03:00.0"]["acs_ctl"] is None
    acs = acs_facts(topo, tmp_path, lspci=LSPCI)
    assert acs["redirecting"] == ["0000:00:01.1"] and acs["with_acs"] == ["0000:00:01.1", "0000:01:00.0"]


def _stack_site(tmp_path: Path, sglang: str, flashinfer: str, fi_base: str) -> Path:
    """An installed stack as doctor sees it: dist-info plus the real release files that say whether the
    PCIe-IPC all-reduce is there (sglang's pcie_ipc_ar.py from 0.5.23; flashinfer's comm/ from `fi_base`'s
    pinned wheel), fetched, sha256-verified and cached."""
    from sglang_blackwell.patchset.bases import get_base
    from sglang_blackwell.patchset.fetch import fetch

    site = tmp_path / f"site-{sglang}-{flashinfer}"
    for base, package, prefixes in (("0.5.23", "sglang", ("sglang/srt/distributed/device_communicators/",)),
                                    (fi_base, "flashinfer", ("flashinfer/comm/pcie_ipc_ar.py",))):
        art = get_base(base).package(package).files_for(None)[0]
        try:
            whl = fetch(art)
        except Exception as e:
            pytest.skip(f"cannot fetch {art.filename}: {e}")
        with zipfile.ZipFile(whl) as z:
            for n in z.namelist():
                if n.startswith(prefixes) and n.endswith(".py") and (package == "flashinfer" or sglang >= "0.5.23"):
                    z.extract(n, site)
    for pkg in ("sglang", "flashinfer"):
        (site / pkg).mkdir(parents=True, exist_ok=True)
        (site / pkg / "__init__.py").write_text("raise ImportError('doctor must not import it')\n")
    _fake_dist(site, "sglang", sglang)
    _fake_dist(site, "flashinfer-python", flashinfer)
    return site


@pytest.mark.network
@pytest.mark.parametrize("stack,env,status,needle", [
    (("0.5.23", "0.7.2", "0.5.23"), {}, "info",
     "available, off (SGLANG_ENABLE_PCIE_IPC_ALLREDUCE unset (default off)): export SGLANG_ENABLE_PCIE_IPC_ALLREDUCE"),
    (("0.5.23", "0.7.2", "0.5.23"), {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, "ok", "on (SGLANG_ENABLE"),
    (("0.5.23", "0.6.12", "0.5.14"), {"SGLANG_ENABLE_PCIE_IPC_ALLREDUCE": "1"}, "warn",
     "SGLANG_ENABLE_PCIE_IPC_ALLREDUCE='1' (on) but it cannot run: needs flashinfer >= 0.7.0"),
    (("0.5.14", "0.6.12", "0.5.14"), {}, "info", "not available: this sglang has no pcie_ipc_ar backend"),
])
def test_pcie_ipc_item(tmp_path, monkeypatch, stack, env, status, needle):
    from sglang_blackwell.box.doctor_allreduce import check_pcie_ipc
    from sglang_blackwell.box.stackinfo import dist_facts

    site = _stack_site(tmp_path, *stack)
    monkeypatch.syspath_prepend(str(site))
    for k in [k for k in os.environ if k.startswith("SGLANG_")]:
        monkeypatch.delenv(k)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    box = Topology.simulated(8, "12.0", kind="SYS", atomics=False, multicast=False)
    c = check_pcie_ipc(Context(box, {}, dist_facts("sglang"), dist_facts("flashinfer-python"), None, None))
    assert c.status == status and needle in c.detail, c
    if status == "warn":
        assert c.fix == "sglang-blackwell install --base 0.5.23 (sglang 0.5.23 + flashinfer 0.7.2)"
    if stack[0] == "0.5.14":
        assert "a PCIe-only box: the case it is made for" in c.detail
    no_gpu = check_pcie_ipc(Context(Topology.simulated(0), {}, None, None, None, None))
    assert no_gpu.status == "n/a"


# ---- bad options: exit 2 naming the option, before any check runs (issue 18 item 10) ---------------------------

@pytest.mark.parametrize("args, message", [
    (["--tp", "0"], "--tp: expected a positive integer (the tensor-parallel size to plan for), got 0"),
    (["--tp", "-3"], "--tp: expected a positive integer (the tensor-parallel size to plan for), got -3"),
    (["--python", "{tmp}/no/python3"], "--python {tmp}/no/python3: no such interpreter"),
    (["--python", "no-such-python-xyz"], "--python no-such-python-xyz: no such interpreter on PATH"),
    (["--out", "{tmp}"], "--out {tmp}: is a directory (give a file name)"),
    (["--out", "{tmp}/file/doctor.json"], "--out {tmp}/file/doctor.json: {tmp}/file is not a directory"),
])
def test_bad_options_are_refused_before_any_check(tmp_path, capsys, args, message):
    from sglang_blackwell.cli import main

    (tmp_path / "file").write_text("x")
    argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if "--out" not in argv:
        argv += ["--out", str(tmp_path / "doctor.json")]
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["doctor", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"sglang-blackwell doctor: error: {message.replace('{tmp}', str(tmp_path))}"
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no receipt, no temporary file


def test_run_doctor_refuses_a_tp_below_one():
    from sglang_blackwell.errors import UserError

    with pytest.raises(UserError, match="--tp: expected a positive integer"):
        run_doctor(tp=0, topology=Topology.simulated(8, "12.0", kind="SYS", atomics=False))


def test_spec_verify_says_what_an_eagle3_server_does_at_long_context(tmp_path, monkeypatch):
    """P8/P9 read from the installed sglang's marker; the switches from the environment; the GPU decides."""
    patched = tmp_path / "patched"
    _fake_dist(patched, "sglang", "0.5.14+sm120.4", {"base": "0.5.14", "patches": [
        {"name": "0006-splitkv-verify-mla-on-cuda.patch", "logical_id": "P8"},
        {"name": "0007-warmup-first-use-compiles.patch", "logical_id": "P9"}]})
    upstream = tmp_path / "upstream"
    _fake_dist(upstream, "sglang", "0.5.14")
    monkeypatch.delenv("SGLANG_ENABLE_SPLITKV_VERIFY", raising=False)
    monkeypatch.delenv("SGLANG_ENABLE_BATCH_SIZE_WARMUP", raising=False)

    def spec(site: Path, topo: Topology) -> dict:
        monkeypatch.syspath_prepend(str(site))
        monkeypatch.setenv("PYTHONPATH", str(site))
        return checks_for(topo)[1]["spec_verify"]

    on = spec(patched, Topology.simulated(8, capability="12.0"))
    assert on["status"] == "ok" and "split-KV target-verify (P8) on" in on["detail"], on
    assert "first-use warm-up (P9) on" in on["detail"] and on["data"]["patches"] == ["P8", "P9"]
    # the kernel target-verify runs, named, and where it does not run
    assert "verify kernel: P8's grouped split-KV kernel (triton_ops/verify_shared_kv.py)" in on["detail"]
    assert "under any other backend (flashinfer" in on["detail"] and "P8 does not run" in on["detail"]
    assert on["data"]["verify_kernel"].startswith("P8's grouped split-KV kernel")
    monkeypatch.setenv("SGLANG_ENABLE_SPLITKV_VERIFY", "0")
    off = spec(patched, Topology.simulated(8, capability="12.0"))
    assert off["status"] == "info" and "turned off by SGLANG_ENABLE_SPLITKV_VERIFY='0' (off)" in off["detail"]
    monkeypatch.delenv("SGLANG_ENABLE_SPLITKV_VERIFY")
    other = spec(patched, Topology.simulated(8, capability="10.0"))
    assert other["status"] == "info" and "off on capability 10.0" in other["detail"]
    plain = spec(upstream, Topology.simulated(8, capability="12.0"))
    assert plain["status"] == "warn" and "no split-KV target-verify" in plain["detail"]
    assert "no first-use warm-up" in plain["detail"] and "sglang-blackwell install" in plain["fix"]
    assert "verify kernel: upstream's extend_attention_fwd" in plain["detail"]
    assert plain["data"]["verify_kernel"].startswith("upstream's extend_attention_fwd")
    assert other["data"]["verify_kernel"].startswith("upstream's extend_attention_fwd")  # SM100: P8 gated off
