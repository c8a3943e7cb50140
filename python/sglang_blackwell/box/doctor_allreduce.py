"""doctor's NCCL and all-reduce items: nccl_env (the NCCL variables in effect and the managed block, for the
environment `--python` names), pcie_ipc (the opt-in FlashInfer PCIe-IPC all-reduce) and allreduce_paths (the path
the patched SGLang takes per message size)."""

from __future__ import annotations

import os

from ..errors import UserError
from ..patchset.bases import pcie_ipc_line
from . import sglang_env
from .allreduce_paths import Facts, flashinfer_facts, package_dir, pcie_ipc, plan, sglang_facts, switch
from .doctor_check import Check, Context, item


def check_nccl_env(c: Context) -> Check:
    from .nccl import load_profiles, resolve
    from .nccl_hook import state

    # NCCL's config files are read by the rules of the NCCL that torch loads here (for --python: that
    # environment's NCCL wheel)
    nccl = c.torch.get("nccl") if c.python is None else None
    try:
        profiles = load_profiles()
        st = state(c.python, profiles=profiles, nccl_version=nccl if isinstance(nccl, str) else None)
    except UserError as e:
        return item("nccl_env", "warn", str(e), "sglang-blackwell nccl show --python <interpreter>")
    env = "; ".join(f"{r['key']}={r['value'] or '-'} ({r['source']})" for r in st["env"]) or "no NCCL_* set"
    act, cls = st["active"], c.topo.topology_class()
    auto = resolve("auto", c.topo, profiles)
    fix = None
    if act:
        text = f"managed block: profile {act['profile']} via {act['hook']} (resolved for {act['class']})"
        prof = profiles.get(act["profile"])
        if act["class"] != cls:
            fix = "sglang-blackwell nccl install --profile auto (re-resolves for this hardware)"
            text += f"; this machine is {cls!r}: the block no longer matches the hardware"
        elif prof is not None and not prof.fits_class(cls):
            fix = f"sglang-blackwell nccl install --profile {auto.profile.name}"
            text += f"; profile {act['profile']} is not meant for {cls!r}"
    else:
        text = "no managed block"
        if cls == "pcie":
            fix = "sglang-blackwell nccl install (auto picks pcie-ll on PCIe-only boxes)"
            text += f" on a PCIe-only box ({auto.reason})"
    nc = st.get("nccl_conf") or {}
    if act and act.get("nccl_conf"):
        text += f"; NCCL config file {act['nccl_conf']}"
    if st["problems"]:
        only_conf = all(p.startswith("NCCL config block") for p in st["problems"])
        fix = fix or (nc.get("fix") if only_conf else None) or "sglang-blackwell nccl install"
        text += "; " + "; ".join(st["problems"])
    if nc.get("hazards"):
        fix = fix or nc.get("fix")
        text += f"; NCCL config ({nc['rules']['label']}): " + "; ".join(nc["hazards"])
    return item("nccl_env", "warn" if fix else "ok", f"{text}; {env}", fix, st)


def allreduce_facts(c: Context) -> Facts:
    t = c.topo
    cap = t.capabilities()[0] if t.gpus else None
    return Facts(tp=c.tp or t.gpu_count, capability=cap, all_nvlink=t.all_nvlink, all_p2p=t.all_p2p,
                 all_native_atomics=t.all_native_atomics, multicast=t.multicast,
                 sglang=c.sglang["version"] if c.sglang else None,
                 sglang_patches=tuple(p for p in (c.sglang or {}).get("patches", []) if p),
                 flashinfer=c.flashinfer["version"] if c.flashinfer else None,
                 trtllm_comm_accepts=c.trtllm.get(cap, {}).get("accepted") if cap else None,
                 env={k: v for k, v in os.environ.items() if k.startswith("SGLANG_")}, **sglang_facts(),
                 bool_rule=sglang_env.installed(package_dir("sglang"), c.sglang["version"] if c.sglang else None).rule,
                 **flashinfer_facts())


def check_pcie_ipc(c: Context) -> Check:
    """The opt-in FlashInfer PCIe-IPC all-reduce of the lines that have it (base.toml [serving]; staged pushes,
    no remote atomics: made for switch-free PCIe boxes): does this stack have it, would it run here, is it on?"""
    f = allreduce_facts(c)
    b = pcie_ipc(f)
    line = pcie_ipc_line()
    env = line.serving.pcie_ipc_env if line else b.enable.split("=")[0]
    reading = switch(f, env, False)
    on = reading.on
    sg = (f"sglang {f.sglang}: {'has' if f.has_pcie_ipc else 'no'} pcie_ipc_ar backend" if f.sglang
          else "sglang: not installed")
    fi = ("flashinfer: not installed" if not f.flashinfer else
          f"flashinfer {f.flashinfer}: " + ("has" if f.flashinfer_pcie_ipc else "no" if f.flashinfer_pcie_ipc is False
                                           else "may have") + " PcieIpcAllReduceWorkspace")
    stack = f"{sg}; {fi}"
    data = {"usable": b.usable, "why": b.why, "enabled": on, "env_read": {"value": reading.value, "on": reading.on,
                                                                         "understood": reading.understood},
            "sglang_has_backend": f.has_pcie_ipc,
            "flashinfer_has_workspace": f.flashinfer_pcie_ipc, "tp": f.tp}
    if c.no_gpu or f.tp < 2:
        return item("pcie_ipc", "n/a", ("no GPU" if c.no_gpu else "TP=1: no all-reduce") + f"; {stack}",
                    data=data)
    if not b.usable:
        why = b.why
        install = (f"sglang-blackwell install --base {line.name} (sglang {line.package('sglang').version} + "
                   f"flashinfer {line.package('flashinfer').version})" if line else "no base line has it yet")
        fix = (install
               if not f.has_pcie_ipc or "flashinfer" in b.why else
               "run sglang at TP 2, 4 or 8" if "world size" in b.why else
               "enable P2P between the GPUs (see the p2p, iommu and acs items)")
        if on:
            return item("pcie_ipc", "warn", f"{reading.text()} but it cannot run: {why} ({stack})", fix, data)
        where = " (a PCIe-only box: the case it is made for)" if c.topo.pcie_only else ""
        return item("pcie_ipc", "info", f"not available: {why}{where}; {stack}; to get it: {fix}", data=data)
    if on:
        return item("pcie_ipc", "ok", f"on ({reading.text()}): decode-sized all-reduces at TP={f.tp} take it, "
                                      f"larger ones stay on NCCL; {stack}", data=data)
    hint = "made for PCIe-only boxes like this one" if c.topo.pcie_only else "made for PCIe-only boxes"
    detail = (f"available, off ({reading.text()}): export {env}=1 to opt in ({hint}; `sglang-blackwell bench "
              f"allreduce --tune` measures whether it beats NCCL here); {stack}")
    if not reading.understood:
        return item("pcie_ipc", "warn", detail, f"set {env}=1 to opt in, or unset it (sglang reads "
                                                f"{f.bool_rule.text() if f.bool_rule else 'true/1/yes/y'})", data)
    return item("pcie_ipc", "info", detail, data=data)


def check_allreduce(c: Context) -> Check:
    facts = allreduce_facts(c)
    p = plan(facts)
    if c.no_gpu or facts.tp < 2:
        return item("allreduce_paths", "n/a", "no GPU" if c.no_gpu else "TP=1: no all-reduce", data=p)

    def row(r: dict) -> str:
        size = r["label"].split(" (")[0]
        path = f"fused AR+RMSNorm in layers, else {r['path']}" if r["fused_in_layers"] else r["path"]
        opt = f" [opt-in: {', '.join(r['opt_in_candidates'])}]" if r["opt_in_candidates"] else ""
        return f"{size}: {path}{opt}"

    detail = f"TP={facts.tp}: " + "; ".join(row(r) for r in p["by_size"])
    if not c.sglang:
        detail += " [sglang not installed: upstream 0.5.x defaults assumed]"
    return item("allreduce_paths", "info", detail, data=p)
