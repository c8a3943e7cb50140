"""Who listens on a TCP port, and could a server listen there now (Linux /proc; elsewhere: unknown).

A port is in use when a socket listens on it; `bind_problem` tries what a server does (bind with SO_REUSEADDR, as
uvicorn and Python's http.server do, so a port whose old connections linger in TIME_WAIT counts as free).
`listener_pids` maps the listening sockets of /proc/net/tcp{,6} to the processes holding them via their
/proc/<pid>/fd links: the processes of this user are visible, other users' (and a container's) are not.
"""

from __future__ import annotations

import errno
import os
import socket
from pathlib import Path

LISTEN = "0A"  # TCP_LISTEN in /proc/net/tcp's st column


def bind_problem(host: str, port: int) -> tuple[str, str] | None:
    """Why a server could not listen on host:port now: ("in use" | "address", what), or None when it could."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as e:
        return "address", f"cannot resolve {host!r}: {e}"
    for family, kind, proto, _, addr in infos:
        try:
            with socket.socket(family, kind, proto) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                s.bind(addr)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return "in use", f"port {port} on {host} is in use"
            return "address", f"cannot listen on {host}:{port} ({e.strerror or e})"
    return None


def _listening_inodes(port: int) -> set[int] | None:
    """Inodes of the sockets listening on `port` (any address, IPv4 or IPv6); None without /proc/net/tcp."""
    found: set[int] | None = None
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        found = found or set()
        for ln in lines:
            f = ln.split()
            if len(f) > 9 and f[3] == LISTEN and int(f[1].rsplit(":", 1)[1], 16) == port:
                found.add(int(f[9]))
    return found


def _socket_inodes(pid: int) -> set[int]:
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:  # gone, or another user's
        return out
    for fd in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out


def listener_pids(port: int, pids: list[int] | None = None) -> list[int] | None:
    """The processes (of `pids`, default: every visible one) holding a socket that listens on `port`; None when
    this machine cannot tell (no /proc/net/tcp)."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    if not inodes:
        return []
    if pids is None:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    return sorted(p for p in pids if _socket_inodes(p) & inodes)


def listening(port: int) -> bool | None:
    """Does any socket listen on `port`? None: cannot tell."""
    inodes = _listening_inodes(port)
    return None if inodes is None else bool(inodes)


def describe(pid: int) -> str:
    """`pid N: <command line>` (shortened), for messages."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    if len(cmd) > 120:
        cmd = cmd[:117] + "..."
    return f"pid {pid}" + (f": {cmd}" if cmd else "")
