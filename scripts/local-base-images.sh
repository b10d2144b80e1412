#!/usr/bin/env bash
# The two base images deploy/Dockerfile names, for a Docker engine that lacks them: each one already there
# is kept, else pulled, else (a machine that reaches only the Debian and PyPI package registries, like the
# project's test hosts: docs/docker-on-test-hosts.md) built here as a stand-in from Debian packages and PyPI:
#
#   python:3.11-slim-bookworm    a debootstrap'ed Debian bookworm (minbase) with Debian's python3 (3.11),
#                                python3-venv, python-is-python3, ca-certificates, netbase, tzdata
#   ghcr.io/astral-sh/uv:VERSION FROM scratch with /uv and /uvx from the uv==VERSION wheel (the static
#                                musllinux build, like the official image's)
#
# The tags are read from deploy/Dockerfile (its PYTHON_IMAGE default and its `COPY --from=...uv:VERSION`),
# so the two cannot drift apart. `--list` prints them and exits.
#
# Usage: scripts/local-base-images.sh [--list] [--tag-prefix PREFIX]
#   --tag-prefix PREFIX   build under PREFIX + tag (e.g. try/), to try the script without touching the
#                         images in use; implies no pull
# Environment:
#   PULL=0          do not try to pull; build what is missing
#   FORCE=1         build the stand-ins even where an image is there (no pull)
#   WORK_DIR        scratch folder (default /tmp/local-base-images)
#   DEBIAN_MIRROR   default: the first Debian mirror in the host's apt sources
#   EXTRA_CA_DIR    *.crt files added to the python image's CA store and exported as SSL_CERT_FILE, for hosts
#                   whose egress intercepts TLS (default /usr/local/share/ca-certificates when it holds any
#                   .crt; EXTRA_CA_DIR= adds none). The build's `uv sync` reaches PyPI through it.
# Needs root, docker, debootstrap, python3 with pip (for the uv wheel).
#
# How the python stand-in differs from the official image (nothing the Dockerfile relies on):
#   - python is Debian's /usr/bin/python3.11 (3.11.2 with Debian's patches), with /usr/local/bin/python and
#     python3 linking to it so the official paths resolve; a venv made in one image does not run in the other.
#   - no pip, setuptools or wheel in the system interpreter (it is also PEP 668 "externally managed").
#   - with EXTRA_CA_DIR: extra CA certificates and ENV SSL_CERT_FILE.
set -euo pipefail
cd "$(dirname "$0")/.."

list=0
prefix=""
while [ $# -gt 0 ]; do
  case "$1" in
    --list) list=1 ;;
    --tag-prefix) prefix="${2:?--tag-prefix needs a value}"; shift ;;
    *) echo "usage: $0 [--list] [--tag-prefix PREFIX]" >&2; exit 2 ;;
  esac
  shift
done

dockerfile=deploy/Dockerfile
py_tag=$(sed -nE 's/^ARG PYTHON_IMAGE=([^ ]+)$/\1/p' "$dockerfile" | head -n1)
uv_tag=$(grep -oE -- '--from=ghcr\.io/astral-sh/uv:[0-9][^ ]*' "$dockerfile" | head -n1 | cut -d= -f2)
if [ -z "$py_tag" ] || [ -z "$uv_tag" ]; then
  echo "$dockerfile: no PYTHON_IMAGE or uv image found" >&2
  exit 1
fi
if [ "$list" = 1 ]; then
  printf '%s\n%s\n' "$py_tag" "$uv_tag"
  exit 0
fi

WORK_DIR=${WORK_DIR:-/tmp/local-base-images}
FORCE=${FORCE:-0}
PULL=${PULL:-1}
[ -z "$prefix" ] || PULL=0
uv_version=${uv_tag##*:}
if [ -z "${EXTRA_CA_DIR+set}" ]; then
  EXTRA_CA_DIR=/usr/local/share/ca-certificates
fi

log() { printf '[local-base-images] %s\n' "$*" >&2; }

# 0 when the image is there (or was pulled) and nothing is to be built.
have() {
  local tag="$1"
  if [ "$FORCE" != 1 ] && docker image inspect "$prefix$tag" >/dev/null 2>&1; then
    log "$prefix$tag is there"
    return 0
  fi
  if [ "$FORCE" != 1 ] && [ "$PULL" = 1 ]; then
    if timeout 600 docker pull -q "$tag" >/dev/null 2>"$WORK_DIR/pull.err"; then
      log "$tag pulled"
      return 0
    fi
    log "$tag cannot be pulled ($(tail -n1 "$WORK_DIR/pull.err")): building a stand-in"
  fi
  return 1
}

# --- python:3.11-slim-bookworm -------------------------------------------------------------------------
build_python() {
  have "$py_tag" && return
  # Debian bookworm's python3 is 3.11: a stand-in for any other tag would lie about its version.
  [ "$py_tag" = python:3.11-slim-bookworm ] \
    || { log "$py_tag: only python:3.11-slim-bookworm can be built from Debian bookworm"; exit 1; }
  command -v debootstrap >/dev/null || { log "debootstrap is missing: apt-get install -y debootstrap"; exit 1; }
  local mirror="${DEBIAN_MIRROR:-}"
  if [ -z "$mirror" ]; then
    mirror=$(grep -rhoE '(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ \
      2>/dev/null | grep -oE 'https?://[^ ]+' | head -n1 || true)
    [ -n "$mirror" ] || { log "no Debian mirror in the apt sources: set DEBIAN_MIRROR"; exit 1; }
  fi
  local security="${SECURITY_MIRROR:-${mirror%/}-security}"
  local root="$WORK_DIR/rootfs-bookworm"
  rm -rf "$root"
  log "debootstrap bookworm into $root"
  debootstrap --variant=minbase \
    --include=python3,python3-venv,python-is-python3,ca-certificates,netbase,tzdata \
    bookworm "$root" "$mirror" >"$WORK_DIR/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK_DIR/debootstrap.log" >&2; exit 1; }
  # deb822 sources like the official debian:bookworm-slim image's (main, updates, security): the
  # Dockerfile's apt-get install bubblewrap reads them.
  rm -f "$root/etc/apt/sources.list"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: ${mirror}
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${security}
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # The official image's python lives in /usr/local/bin: make that path resolve too.
  ln -sf /usr/bin/python3 "$root/usr/local/bin/python3"
  ln -sf /usr/bin/python3 "$root/usr/local/bin/python"
  local changes=(--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
                 --change 'ENV LANG=C.UTF-8'
                 --change 'CMD ["python3"]')
  if [ -n "$EXTRA_CA_DIR" ] && compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
    log "adding the CA certificates of $EXTRA_CA_DIR and ENV SSL_CERT_FILE"
    cp "$EXTRA_CA_DIR"/*.crt "$root/usr/local/share/ca-certificates/"
    chroot "$root" update-ca-certificates >/dev/null
    changes+=(--change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt')
  fi
  chroot "$root" apt-get clean
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/log/*.log "$root"/tmp/*
  : >"$root/etc/hostname"
  log "importing as $prefix$py_tag"
  tar --numeric-owner --xattrs -C "$root" -c . | docker import "${changes[@]}" - "$prefix$py_tag" >/dev/null
  rm -rf "$root"
  docker run --rm --network none "$prefix$py_tag" \
    sh -c 'python --version && command -v python python3 && prlimit --version | head -n1' >&2
}

# --- ghcr.io/astral-sh/uv:VERSION ----------------------------------------------------------------------
build_uv() {
  have "$uv_tag" && return
  local dir="$WORK_DIR/uv-$uv_version"
  rm -rf "$dir" && mkdir -p "$dir/wheel" "$dir/ctx"
  # The musllinux wheel's binary is static, like the official image's /uv: it runs FROM scratch and in any
  # base (the manylinux one needs glibc).
  log "the uv==$uv_version musllinux wheel from PyPI"
  python3 -m pip download --quiet "uv==$uv_version" --no-deps --only-binary=:all: \
    --platform musllinux_1_1_x86_64 --python-version 3.11 -d "$dir/wheel"
  python3 - "$dir/wheel" "$dir/ctx" <<'EOF'
import os, pathlib, sys, zipfile
wheel = next(pathlib.Path(sys.argv[1]).glob("uv-*.whl"))
out = pathlib.Path(sys.argv[2])
with zipfile.ZipFile(wheel) as z:
    for name in z.namelist():
        if "/scripts/" in name and name.rsplit("/", 1)[1] in ("uv", "uvx"):
            target = out / name.rsplit("/", 1)[1]
            target.write_bytes(z.read(name))
            os.chmod(target, 0o755)
EOF
  [ -x "$dir/ctx/uv" ] || { log "no uv binary in the wheel"; exit 1; }
  printf 'FROM scratch\nCOPY uv uvx /\nENTRYPOINT ["/uv"]\n' >"$dir/ctx/Dockerfile"
  log "building $prefix$uv_tag"
  # The legacy builder where there is no buildx; it needs no network for this (no RUN).
  DOCKER_BUILDKIT=0 docker build -q -t "$prefix$uv_tag" "$dir/ctx" >/dev/null 2>"$dir/build.err" \
    || docker build -q -t "$prefix$uv_tag" "$dir/ctx" >/dev/null
  rm -rf "$dir"
  docker run --rm --network none "$prefix$uv_tag" --version >&2
}

mkdir -p "$WORK_DIR"
build_python
build_uv
