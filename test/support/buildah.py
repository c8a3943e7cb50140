"""Debian's buildah, driven the way docker/standin-image.sh uses it (a storage of its own, chroot isolation):
the image's configuration as the builder recorded it, and commands run in a container of the image as the
image's own user, environment and working directory."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


def missing_tools() -> list[str]:
    """What `make image-test` needs here and lacks (empty: nothing)."""
    out = [f"{t} (Debian: apt-get install -y buildah debootstrap)" for t in ("buildah", "debootstrap")
           if shutil.which(t) is None]
    if os.geteuid() != 0:
        out.append(f"root (uid {os.geteuid()}): debootstrap and buildah's vfs storage need it")
    return out


@dataclass
class Buildah:
    storage: Path  # the STORAGE of docker/standin-image.sh

    @property
    def driver(self) -> str:
        """overlay or vfs: what the script chose for this storage."""
        return (self.storage / "storage-driver").read_text().strip()

    @property
    def base_args(self) -> list[str]:
        return ["buildah", "--root", str(self.storage / "root"), "--runroot", str(self.storage / "run"),
                "--storage-driver", self.driver]

    def __call__(self, *args: str, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
        r = subprocess.run([*self.base_args, *args], capture_output=True, text=True, timeout=timeout)
        if check and r.returncode != 0:
            raise AssertionError(f"buildah {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
        return r

    def image_config(self, image: str) -> dict:
        """The Docker-format config the build wrote (Entrypoint, Cmd, User, Env, Volumes, Labels, Healthcheck)."""
        return json.loads(self("inspect", "--type", "image", image).stdout)["Docker"]["config"]

    def container(self, image: str) -> Container:
        return Container(self, self("from", "-q", image).stdout.strip())

    def remove_storage(self) -> None:
        """Every container of this storage (unmounting overlays), then the storage itself."""
        if (self.storage / "storage-driver").is_file():
            self("rm", "--all", check=False)
        shutil.rmtree(self.storage, ignore_errors=True)


@dataclass
class Container:
    buildah: Buildah
    name: str

    def run(self, *cmd: str, env: dict[str, str] | None = None, user: str | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess:
        """`buildah run`: the image's user, Env and WorkingDir unless overridden; the host's network."""
        opts = ["--isolation", "chroot"]
        for k, v in (env or {}).items():
            opts += ["--env", f"{k}={v}"]
        if user is not None:
            opts += ["--user", user]
        return self.buildah("run", *opts, self.name, "--", *cmd, check=False, timeout=timeout)

    def copy_out(self, path: str, dest: Path) -> Path:
        """A directory or file of the container's filesystem, copied to dest."""
        mnt = Path(self.buildah("mount", self.name).stdout.strip())
        try:
            src = mnt / path.lstrip("/")
            if src.is_dir():
                shutil.copytree(src, dest)
            else:
                shutil.copy2(src, dest)
        finally:
            self.buildah("umount", self.name)
        return dest

    def remove(self) -> None:
        self.buildah("rm", self.name, check=False)
