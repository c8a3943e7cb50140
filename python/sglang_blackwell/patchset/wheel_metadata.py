"""A wheel's METADATA, read from the wheel itself (the one `<name>.dist-info/METADATA`): what base bump and the
bundle's dependency reader ask of a wheel's Requires-Dist. Errors name the wheel."""

from __future__ import annotations

import zipfile
from email.message import Message
from email.parser import HeaderParser
from pathlib import Path

from ..errors import UserError


def wheel_metadata(path: Path) -> Message:
    """The METADATA headers of the wheel at `path`; UserError naming it when it is no readable wheel or has not
    exactly one top-level .dist-info/METADATA."""
    try:
        with zipfile.ZipFile(path) as z:
            metas = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(metas) != 1:
                raise UserError(f"{path.name}: {len(metas)} .dist-info/METADATA files, expected 1")
            return HeaderParser().parsestr(z.read(metas[0]).decode("utf-8", "replace"))
    except zipfile.BadZipFile as e:
        raise UserError(f"{path.name}: not a readable wheel: {e}") from None
