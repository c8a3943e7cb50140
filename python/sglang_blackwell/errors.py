"""The one error type the CLI turns into a clear message and a non-zero exit."""

from __future__ import annotations


class UserError(Exception):
    """Bad input or a failed precondition. The message names the thing at fault."""

    exit_code = 2


class IntegrityError(UserError):
    """An artifact does not match its pinned hash or size."""

    exit_code = 3


class ApplyError(UserError):
    """A patch does not apply with zero fuzz."""

    exit_code = 4

    def __init__(self, patch: str, file: str, hunk: int | None, reason: str):
        self.patch, self.file, self.hunk, self.reason = patch, file, hunk, reason
        where = f"hunk #{hunk}" if hunk is not None else "file header"
        super().__init__(f"patch {patch}: {file}: {where}: {reason}")
