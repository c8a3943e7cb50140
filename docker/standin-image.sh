#!/usr/bin/env bash
# Builds docker/Dockerfile on a CPU machine with no Docker engine and no registry (`make image-test`, .ci/run):
#
#  1. A stand-in for the CUDA base image, which cannot be pulled here: Debian (minbase) made with debootstrap.
#     The default suite is bookworm (Debian 12): the newest Debian whose python3 (3.11) the bases' hashed locks
#     cover. trixie (Debian 13) is nearer the CUDA image's Ubuntu 24.04 (glibc 2.41 vs 2.39), but its python3 is
#     3.13, and no base installs there (sglang requires outlines==0.1.11 -> outlines_core 0.1.26, which has no
#     cp313 wheel: patches/<base>/locks/lock.toml [unsupported]). The default base (0.5.14) pins one sglang wheel
#     per CPython: the stand-in builds and installs its cp311 wheel where the real image (python 3.12) installs
#     cp312 (same series; flashinfer is py3-none-any, the same file in both). 0.5.23 pins cp311 too; 0.5.9's wheels
#     are py3-none-any (BASE=...).
#  2. buildah (chroot isolation, Docker image format so that the HEALTHCHECK is kept; overlay storage where
#     this kernel lets root mount overlayfs, else vfs) builds the Dockerfile the way release.yml does: the manifest stage, then the runtime stage labelled from that stage's
#     labels.txt, the builder stage built once (--layers). CUDA_IMAGE is the stand-in, CUDA_ARCHS is empty (no
#     nvcc in the stand-in: no AOT modules) and SKIP_CUDA_WHEELS=1 (no torch or kernel wheel: our wheels go in
#     with --no-deps, as in test/unit/release/test_install_stack.py).
#
# What this cannot show: CUDA, a GPU, the digest-pinned nvidia/cuda image, torch +cu130 and the kernel wheel,
# sglang's other dependencies, FlashInfer's AOT modules in the image.
#
# Environment:
#   STORAGE  buildah storage for this build (a few GB; vfs: a full copy per layer); the caller removes it, after
#            `buildah rm --all` (DRIVER is written to $STORAGE/storage-driver)                          (required)
#   DRIVER   buildah storage driver: overlay, vfs, or auto (overlay if a test mount works here, else vfs;
#            on 2 cores overlay builds in about a quarter of vfs's time)                              (default auto)
#   TAG      the image built                                         (default localhost/sglang-blackwell:standin)
#   CACHE    files kept between runs, which CI caches: debootstrap's and apt's packages, and the Dockerfile's
#            cache mount (pip, sglang-blackwell's artifact cache)     (default ~/.cache/sglang-blackwell/image)
#   SUITE    Debian release of the stand-in                                                  (default bookworm)
#   BASE     base line                                                      (default: the Dockerfile's ARG BASE)
#   SRC      build context                                                        (default: this script's checkout)
set -euo pipefail

: "${STORAGE:?STORAGE: a directory for the buildah storage (several GB)}"
TAG=${TAG:-localhost/sglang-blackwell:standin}
CACHE=${CACHE:-$HOME/.cache/sglang-blackwell/image}
SUITE=${SUITE:-bookworm}
SRC=${SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
BASE=${BASE:-}

say() { printf '== standin-image: %s\n' "$*"; }
die() { printf 'standin-image: error: %s\n' "$*" >&2; exit 2; }
timed() {  # timed NAME CMD...: run CMD, then say how long it took
  local name=$1 t0=$SECONDS
  shift
  "$@"
  say "$name: $((SECONDS - t0)) s"
}

for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || die "$tool not found (Debian: apt-get install -y buildah debootstrap)"
done
[[ $(id -u) == 0 ]] || die "debootstrap and buildah's vfs storage need root here (uid $(id -u))"
[[ -f $SRC/docker/Dockerfile ]] || die "SRC=$SRC has no docker/Dockerfile"

mkdir -p "$STORAGE" "$CACHE/debootstrap" "$CACHE/apt" "$CACHE/buildah-tmp"
STORAGE=$(cd "$STORAGE" && pwd) CACHE=$(cd "$CACHE" && pwd)  # debootstrap's --cache-dir must be absolute

overlay_mounts() {
  local d=$STORAGE/overlay-probe rc=1
  mkdir -p "$d/lower" "$d/upper" "$d/work" "$d/merged"
  if mount -t overlay overlay -o "lowerdir=$d/lower,upperdir=$d/upper,workdir=$d/work" "$d/merged" 2>/dev/null; then
    umount "$d/merged" && rc=0
  fi
  rm -rf "$d"
  return $rc
}
DRIVER=${DRIVER:-auto}
if [[ $DRIVER == auto ]]; then
  if overlay_mounts; then DRIVER=overlay; else DRIVER=vfs; fi
fi
[[ $DRIVER == overlay || $DRIVER == vfs ]] || die "DRIVER=$DRIVER: use overlay, vfs or auto"
echo "$DRIVER" >"$STORAGE/storage-driver"
B=(buildah --root "$STORAGE/root" --runroot "$STORAGE/run" --storage-driver "$DRIVER")
# buildah keeps RUN --mount=type=cache directories under $TMPDIR/buildah-cache*: here, in CACHE
export TMPDIR=$CACHE/buildah-tmp
STANDIN=localhost/sglang-blackwell-standin:$SUITE

standin() {
  local rootfs=$STORAGE/rootfs ctr mnt
  rm -rf "$rootfs"
  debootstrap --variant=minbase --cache-dir="$CACHE/debootstrap" "$SUITE" "$rootfs" >"$STORAGE/debootstrap.log" 2>&1 \
    || { tail -20 "$STORAGE/debootstrap.log" >&2; die "debootstrap $SUITE failed ($STORAGE/debootstrap.log)"; }
  # this machine's own CA certificates (a TLS-intercepting proxy's, say): the builder stage's ca-certificates
  # package then trusts them, as a base image made for this network would
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    mkdir -p "$rootfs/usr/local/share/ca-certificates"
    cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/"
  fi
  ctr=$("${B[@]}" from scratch)
  mnt=$("${B[@]}" mount "$ctr")
  cp -a "$rootfs/." "$mnt/"
  "${B[@]}" umount "$ctr" >/dev/null
  "${B[@]}" config --created-by "debootstrap --variant=minbase $SUITE" \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --cmd /bin/bash \
    --label "io.github.sglang-blackwell.standin-base=debian:$SUITE" "$ctr"
  "${B[@]}" commit -q "$ctr" "$STANDIN" >/dev/null
  "${B[@]}" rm "$ctr" >/dev/null
  rm -rf "$rootfs"
}

build=(build --isolation chroot --layers --format docker -f "$SRC/docker/Dockerfile"
       --build-arg "CUDA_IMAGE=$STANDIN" --build-arg CUDA_ARCHS= --build-arg SKIP_CUDA_WHEELS=1
       --volume "$CACHE/apt:/var/cache/apt/archives")
[[ -z $BASE ]] || build+=(--build-arg "BASE=$BASE")

manifest_stage() {
  rm -rf "$STORAGE/image-manifest"
  "${B[@]}" "${build[@]}" --target manifest --output "type=local,dest=$STORAGE/image-manifest" "$SRC"
}

runtime_stage() {
  local labels=() line
  while IFS= read -r line; do
    labels+=(--label "$line")
  done <"$STORAGE/image-manifest/labels.txt"
  ((${#labels[@]})) || die "$STORAGE/image-manifest/labels.txt is empty"
  "${B[@]}" "${build[@]}" --target runtime "${labels[@]}" -t "$TAG" "$SRC"
}

t0=$SECONDS
say "storage $STORAGE ($DRIVER); stand-in base $STANDIN (debootstrap $SUITE)"
timed "stand-in base" standin
say "manifest stage (builder: apt, install-stack.sh)"
timed "manifest stage" manifest_stage
say "runtime stage, labelled from $STORAGE/image-manifest/labels.txt"
timed "runtime stage" runtime_stage
say "done: $TAG in $STORAGE ($((SECONDS - t0)) s)"
