"""Who can reach the server `serve` starts: a --host beyond loopback without --api-key is refused, unless the
user opts out loudly (`serve --allow-unauthenticated`).

sglang binds --host (default 127.0.0.1). Without --api-key every endpoint answers whoever reaches the port; the
admin endpoints (weight loading from a path the caller names, profiling into a caller-named directory, memory
release, pausing, ...) need --admin-api-key on our wheels when the host is not loopback (P12: closed, 403, while
it is unset) and are opened by either key on upstream's. /health never needs a key (probes and the image's
HEALTHCHECK keep working).
"""

from __future__ import annotations

import ipaddress

from ..errors import UserError
from .sglang_argv import SglangArgv

DEFAULT_HOST = "127.0.0.1"  # sglang's ServerArgs.host on 0.5.9, 0.5.14, 0.5.23
OPT_OUT = "--allow-unauthenticated"


def is_loopback(host: str) -> bool:
    """localhost or a loopback address (127.0.0.0/8, ::1): reachable from this machine only. 0.0.0.0, ::, any
    other address or name is not."""
    bare = host.strip("[]")
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:
        return False


def check(parsed: SglangArgv, *, allow_unauthenticated: bool) -> list[str]:
    """What serve says about who can reach the server (lines for its plan); UserError for a host beyond loopback
    without --api-key, unless allow_unauthenticated."""
    host = parsed.host if parsed.host is not None else DEFAULT_HOST
    where = parsed.host_setting or f"--host {host} (sglang's default)"
    if is_loopback(host):
        return [f"{where}: loopback, reachable from this machine only"]
    if not parsed.api_key_set:
        if not allow_unauthenticated:
            raise UserError(f"{where}: the server would answer anyone who reaches this machine, with no key: add "
                            f"--api-key <key> and --admin-api-key <another key> after --, or bind --host "
                            f"127.0.0.1 (serve {OPT_OUT} starts it open anyway)")
        return [f"WARNING: {OPT_OUT}: {where} with no --api-key: anyone who reaches this machine can generate "
                "with it" + ("" if parsed.admin_api_key_set else
                             "; its admin endpoints stay closed (P12) until --admin-api-key is set")]
    if parsed.admin_api_key_set:
        return [f"{where}: --api-key for the API, --admin-api-key for the admin endpoints"]
    return [f"{where}: --api-key for the API; no --admin-api-key, so the admin endpoints are closed (403, P12: "
            "our wheels; upstream's would take the API key)"]
