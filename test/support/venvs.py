"""A venv with pip, as `venv.EnvBuilder(with_pip=True)` makes it, for the tests that install into one: made once per
run (ensurepip takes ~3 s on 2 cores, a copy ~0.1 s) and copied for each test, which then owns its copy and may
install into it. A copy is a venv of its own: its bin/python is a copy of the base interpreter (EnvBuilder's
default, symlinks=False), so sys.prefix is where the copy lies, and `python -m pip` installs there. Only
pyvenv.cfg's informational `command` line and the template's own scripts (bin/pip, bin/activate) still name the
template's path; no test runs them."""

from __future__ import annotations

import ensurepip
import hashlib
import shutil
import sys
import venv
from pathlib import Path

from support.shared_tmp import made_once_dir


def template_key() -> str:
    """What the template is made from: the base interpreter (its path and version) and the pip ensurepip bundles."""
    facts = f"{sys._base_executable}\n{sys.version}\n{ensurepip.version()}"
    return "venv-with-pip-" + hashlib.sha256(facts.encode()).hexdigest()[:16]


def venv_template(shared: Path) -> Path:
    """The run's venv with pip (under `shared`, a directory every xdist worker of the run sees); read-only."""
    return made_once_dir(shared, template_key(), lambda d: venv.EnvBuilder(with_pip=True).create(d / "venv")) / "venv"


def venv_with_pip(dest: Path, template: Path) -> Path:
    """A fresh venv with pip at `dest`, copied from `template` (venv_template); returns its python."""
    shutil.copytree(template, dest, symlinks=True)
    return dest / "bin" / "python"
