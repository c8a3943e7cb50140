"""P12 (sglang, every base): a server listening beyond loopback without --admin-api-key keeps its admin
endpoints (ADMIN_OPTIONAL: weight loading from a path the caller names, /start_profile into a caller-named
directory, /pause_generation, /release_memory_occupation, ...) closed: 403 with a body that names
--admin-api-key, whatever key is sent. Loopback servers, --admin-api-key servers, /health and NORMAL endpoints
behave as upstream's.

Where the line has it (0.5.14, 0.5.23) the probe runs upstream's `_setup_and_run_http_server` for real on
0.0.0.0 or 127.0.0.1 (support/scenarios_auth.servers) and calls every ADMIN_OPTIONAL route; on 0.5.9, whose
`launch_server` also spawns the scheduler, it reads where the middleware is installed and asks upstream's pure
`decide_request_auth` (scenarios_auth.wiring, decisions).
"""

from __future__ import annotations

import pytest

from .conftest import carrying

PROBE = """
import json
from support.scenarios_auth import decisions, servers, wiring
print(json.dumps({"wiring": wiring(), "decisions": decisions(), "servers": servers()}))
"""
CLOSED = ("any host, no keys", "any host, --api-key only")
LOOPBACK = {"127.0.0.1": True, "127.0.0.2": True, "localhost": True, "::1": True, "[::1]": True, "0.0.0.0": False,
            "::": False, "10.0.0.5": False, "example.org": False, "": False, "null": False}


def _wiring_problems(r: dict) -> list[str]:
    w = r["wiring"]
    if not (w.get("passes") and w.get("computes") and w.get("gated")):
        return [f"{w.get('function')}: the server does not install the auth middleware with "
                f"admin_needs_admin_key = not is_loopback_host(host) (found: {w})"]
    return []


def _decision_problems(r: dict) -> list[str]:
    d = r["decisions"]
    if not d["takes_host"]:
        return ["decide_request_auth takes no admin_needs_admin_key / no is_loopback_host in utils/auth.py"]
    out = [f"is_loopback_host({h!r}) = {d['loopback'].get(h)}" for h, want in LOOPBACK.items()
           if d["loopback"].get(h) is not want]
    rows = d["rows"]
    for name in CLOSED:
        for key, dec in rows[name].items():
            if key == "health":
                continue
            if dec["allowed"] or dec["status"] != 403 or "--admin-api-key" not in (dec["reason"] or ""):
                out.append(f"{name}, {key}: an admin endpoint decision {dec}")
    admin = rows["any host, --admin-api-key"]
    if not admin["admin key"]["allowed"] or admin["api key"]["allowed"] or admin["no key"]["allowed"]:
        out.append(f"--admin-api-key: {admin}")
    if not rows["loopback, no keys"]["no key"]["allowed"]:
        out.append("a loopback server without keys closes its admin endpoints (upstream opens them)")
    out += [f"{n}: /health needs a key" for n, row in rows.items() if not row["health"]["allowed"]]
    return out


def _server_problems(r: dict) -> list[str]:
    s = r["servers"]
    if s["missing"]:
        return []  # 0.5.9: no _setup_and_run_http_server (wiring and decisions cover it)
    out = []
    for name in CLOSED:
        row = s[name]
        for key, tried in row["admin"].items():
            if len(tried) != row["routes"] or any(t.get("status") != 403 for t in tried.values()):
                let = {p: t for p, t in tried.items() if t.get("status") != 403}
                out.append(f"{name}, {key}: admin routes let through: {let}")
            elif not all("--admin-api-key" in t["body"] for t in tried.values()):
                out.append(f"{name}, {key}: a 403 that does not say --admin-api-key")
    admin = s["any host, --admin-api-key"]["admin"]
    if any(t.get("status") not in (401,) for k in ("no key", "api key") for t in admin[k].values()):
        out.append(f"--admin-api-key: an admin route open without the admin key {admin}")
    if admin["admin key"].get("POST /flush_cache", {}).get("at") != "scheduler":
        out.append(f"--admin-api-key: /flush_cache with the admin key did not reach the scheduler {admin['admin key']}")
    if s["loopback, no keys"]["admin"]["no key"].get("POST /flush_cache", {}).get("at") != "scheduler":
        out.append("loopback without keys: /flush_cache did not reach the scheduler (upstream's behaviour)")
    for name, row in s.items():
        if name == "missing":
            continue
        if row["health"].get("status") in (401, 403):
            out.append(f"{name}: /health needs a key")
        no_api_key = name in ("any host, no keys", "loopback, no keys")
        if no_api_key and row["generate"].get("at") != "scheduler":
            out.append(f"{name}: /generate without a key did not reach the scheduler")
        if not no_api_key and row["generate"].get("status") != 401:
            out.append(f"{name}: /generate without the API key: {row['generate']}")
    return out


def _problems(r: dict) -> list[str]:
    return _wiring_problems(r) + _decision_problems(r) + _server_problems(r)


@pytest.fixture(scope="module", params=carrying("P12"))
def outcome(request, patch_trees):
    return patch_trees.assert_needs_patch(request.param, "P12", PROBE, _problems)


def test_server_installs_the_check_from_its_host(outcome):
    assert _wiring_problems(outcome["with"]) == []


def test_admin_endpoints_closed_beyond_loopback_without_admin_key(outcome):
    assert _decision_problems(outcome["with"]) == [] and _server_problems(outcome["with"]) == []


def test_without_it_anyone_is_an_admin_on_0_0_0_0(outcome):
    rows = outcome["without"]["decisions"]["rows"]
    assert rows["any host, no keys"]["no key"]["allowed"]
