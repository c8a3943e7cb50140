"""The patch report `make` prints: each patch, what it does, and its Upstream-Status."""

from __future__ import annotations

import textwrap

from .bases import Base, series_for
from .plural import counted


def patch_report(base: Base) -> str:
    lines = [f"Patch series for base {base.name} ({base.role})", ""]
    for pkg in base.patched:
        series = series_for(base, pkg.package)
        lines.append(f"{pkg.distribution} {pkg.version} -> {base.local_version(pkg)}: "
                     f"{counted(len(series.patches), 'patch')}")
        for p in series.patches:
            lines.append(f"  {p.logical_id:<4} {p.name}")
            lines += textwrap.wrap(p.subject, 100, initial_indent="       ", subsequent_indent="       ")
            lines.append(f"       Upstream-Status: {p.upstream_status}")
        for lid in sorted(base.absorbed):
            dist, version = base.absorbed_since(lid)
            if dist == pkg.distribution:
                lines.append(f"  {lid:<4} absorbed: upstream has it since {dist} {version}")
        lines.append("")
    return "\n".join(lines)
