"""P12 (admin endpoints closed beyond loopback without an admin key): who gets through sglang's own server, on CPU.

Where the line has it (0.5.14, 0.5.23), `servers()` runs upstream's `_setup_and_run_http_server` for real, in a
thread: the function `launch_server` calls once the scheduler is up, which installs the auth middleware from the
server's arguments and runs uvicorn on --host/--port. Its state is a real TokenizerManager with the stub
scheduler of support.scenarios_requests, so a request that passes the middleware is seen arriving there (or
answered by the HTTP layer). Each server arrangement gets a fresh import of http_server (a FastAPI app takes no
middleware once it has served).

0.5.9 installs the middleware inline in `launch_server`, which also spawns the scheduler processes; there
`wiring()` reads that code's syntax tree and `decisions()` asks upstream's pure `decide_request_auth` (written to
be unit-tested) for every ADMIN_OPTIONAL route of the app.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import random
import socket
import sys
import threading
from pathlib import Path

HTTP_SERVER = "sglang.srt.entrypoints.http_server"
AUTH = "sglang.srt.utils.auth"
ADMIN_KEY = "admin-secret"
API_KEY = "user-secret"
# (name, host, api_key, admin_api_key)
ARRANGEMENTS = [
    ("any host, no keys", "0.0.0.0", None, None),
    ("any host, --api-key only", "0.0.0.0", API_KEY, None),
    ("any host, --admin-api-key", "0.0.0.0", API_KEY, ADMIN_KEY),
    ("loopback, no keys", "127.0.0.1", None, None),
]


def _free_port() -> int:
    # below 30000: ServerArgs derives other ports from --port and refuses any past 65535
    for _ in range(200):
        port = random.randint(20000, 30000)
        s = socket.socket()
        try:
            s.bind(("0.0.0.0", port))
            return port
        except OSError:
            continue
        finally:
            s.close()
    raise RuntimeError("no free port in 20000-30000")


def admin_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every route the app marks ADMIN_OPTIONAL (paths without parameters)."""
    auth = importlib.import_module(AUTH)
    out = []
    for route in app.routes:
        level = getattr(getattr(route, "endpoint", None), "_auth_level", None)
        if level == auth.AuthLevel.ADMIN_OPTIONAL and "{" not in route.path:
            method = "POST" if "POST" in route.methods else sorted(route.methods)[0]
            out.append((method, route.path))
    return sorted(set(out))


def servers() -> dict:
    """Per arrangement: every ADMIN_OPTIONAL route without a key, with the API key and with the admin key;
    /health and /generate without a key."""
    from support.scenarios_requests import Client, _template_manager, import_http_server, tokenizer_manager

    hs = import_http_server()
    if not hasattr(hs, "_setup_and_run_http_server"):
        return {"missing": True}
    out: dict = {"missing": False}
    for name, host, api_key, admin_api_key in ARRANGEMENTS:
        hs = importlib.reload(sys.modules[HTTP_SERVER])
        port = _free_port()
        args, port_args, tm = tokenizer_manager(host=host, port=port, skip_server_warmup=True, api_key=api_key,
                                                admin_api_key=admin_api_key, log_level_http="warning")
        client = Client(port_args, port)
        threading.Thread(target=hs._setup_and_run_http_server,
                         args=(args, tm, _template_manager(), port_args, [{}], None), daemon=True).start()
        client.wait_up()
        routes = admin_routes(hs.app)
        row: dict = {"routes": len(routes), "admin": {}}
        for key_name, key in (("no key", None), ("api key", api_key), ("admin key", admin_api_key)):
            if key_name != "no key" and key is None:
                continue
            headers = {"Authorization": f"Bearer {key}"} if key else {}
            row["admin"][key_name] = _try_routes(client, routes, headers)
        row["health"] = _brief(client.send("/health", {}, method="GET"))
        row["generate"] = _brief(client.send("/generate", {"input_ids": [1, 2], "sampling_params": {
            "max_new_tokens": 1}}))
        out[name] = row
    return out


def _try_routes(client, routes: list[tuple[str, str]], headers: dict) -> dict:
    """Each admin route in turn, /flush_cache first (an accepted one reaches the stub scheduler at once), until
    one is let through the middleware (anything but a 401/403): what the server answered, per route tried. An
    accepted admin call does what it says (pauses generation, ...), so none is tried after it."""
    ordered = sorted(routes, key=lambda r: (r[1] != "/flush_cache", r))
    out = {}
    for method, path in ordered:
        got = _brief(client.send(path, {}, headers=headers, method=method))
        out[f"{method} {path}"] = got
        if got.get("status") not in (401, 403):
            break
    return out


def _brief(outcome: dict) -> dict:
    if outcome["at"] == "http":
        return {"at": "http", "status": outcome["status"], "body": outcome["body"][:300]}
    return {"at": outcome["at"], **({"got": outcome["got"]} if "got" in outcome else {})}


def decisions() -> dict:
    """upstream's decide_request_auth for an ADMIN_OPTIONAL route without a key and with the API key, per
    arrangement, as the patched middleware asks it (admin_needs_admin_key from the host) where the function
    takes that argument."""
    auth = importlib.import_module(AUTH)
    fn = auth.decide_request_auth
    takes = "admin_needs_admin_key" in inspect.signature(fn).parameters
    loopback = getattr(auth, "is_loopback_host", None)
    out: dict = {"takes_host": takes and loopback is not None, "rows": {}}
    for name, host, api_key, admin_api_key in ARRANGEMENTS:
        extra = {"admin_needs_admin_key": not loopback(host)} if out["takes_host"] else {}
        row = {}
        for key_name, key in (("no key", None), ("api key", api_key), ("admin key", admin_api_key)):
            if key_name != "no key" and key is None:
                continue
            d = fn(method="POST", path="/flush_cache", authorization_header=f"Bearer {key}" if key else None,
                   api_key=api_key, admin_api_key=admin_api_key, auth_level=auth.AuthLevel.ADMIN_OPTIONAL, **extra)
            row[key_name] = {"allowed": d.allowed, "status": d.error_status_code, "reason": getattr(d, "reason", None)}
        h = fn(method="GET", path="/health", authorization_header=None, api_key=api_key,
               admin_api_key=admin_api_key, auth_level=auth.AuthLevel.NORMAL, **extra)
        row["health"] = {"allowed": h.allowed}
        out["rows"][name] = row
    if loopback is not None:
        out["loopback"] = {h: loopback(h) for h in ("127.0.0.1", "127.0.0.2", "localhost", "::1", "[::1]",
                                                     "0.0.0.0", "::", "10.0.0.5", "example.org", "", None)}
    return out


def wiring() -> dict:
    """Where the server installs the middleware (launch_server on 0.5.9, _setup_and_run_http_server later):
    does it compute admin_needs_admin_key from is_loopback_host(<...>.host), install the middleware when it is
    set (no key configured at all), and pass it on?"""
    spec = importlib.util.find_spec(HTTP_SERVER)
    tree = ast.parse(Path(spec.origin).read_text())  # read, not imported
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef):
            continue
        calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", None) == "add_api_key_middleware"]
        if not calls:
            continue
        src = ast.unparse(fn)
        passes = any(k.arg == "admin_needs_admin_key" for k in calls[0].keywords)
        computes = "admin_needs_admin_key = not is_loopback_host(" in src and ".host)" in src
        gated = any(isinstance(n, ast.If) and "admin_needs_admin_key" in ast.unparse(n.test)
                    and any(c in ast.walk(n) for c in calls) for n in ast.walk(fn))
        return {"function": fn.name, "passes": passes, "computes": computes, "gated": gated}
    return {"function": None}

