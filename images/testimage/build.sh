#!/usr/bin/env bash
# Builds shellbox-test:latest, a tiny image for CI and tests, from the host's
# own binaries: no registry, no network, a few seconds.
#
# The rootfs holds bash, dash as /bin/sh, a set of coreutils and friends, their
# shared libraries (found with ldd) and the dynamic loader, /etc/passwd and
# /etc/group with root, sandbox (1000) and nobody, /tmp (1777) and /workspace
# (owned by 1000). It is tarred deterministically and `docker import`ed. The
# tar's sha256 is stored as a label, so a rerun on an unchanged host only
# compares hashes and imports nothing.
#
# With --rootfs DIR it only builds the rootfs into DIR (a new or empty
# directory; everything in it is owned by the caller, the image's owners are
# root but for /workspace and /home/sandbox, 1000) and stops: no tar, no
# Docker. shellbox's Go code (images.BuildTestImage) archives that directory
# as an OCI image for containerd.
#
# With --clients it builds shellbox-test-clients:latest instead: the same
# rootfs plus the real clients the egress tests drive (issue 25), all from
# the host: git (/usr/lib/git-core, its templates), python3 (the stdlib
# without test suites, IDLE, tkinter, lib2to3, the static library and
# __pycache__; requests, urllib3, certifi, idna, charset_normalizer,
# chardet and six from /usr/lib/python3/dist-packages; ensurepip and the
# pip and setuptools wheels of /usr/share/python-wheels, so `python3 -m
# venv` makes a venv with pip: the workload suite's pip install), node,
# tar and gzip, with their libraries. No CA bundle: the sandbox's bundle
# (/run/shellbox/egress-ca.pem) is the relay's. On Debian 12: apt-get
# install git python3-requests python3-venv python3-pip nodejs.
#
# Usage: build.sh [--force] [--clients] [--rootfs DIR]
# Environment:
#   SHELLBOX_TEST_IMAGE  tag to produce (default shellbox-test:latest, with
#                        --clients shellbox-test-clients:latest)
#   DOCKER               docker CLI (default docker)
set -euo pipefail

DOCKER="${DOCKER:-docker}"
FORCE=0
CLIENTS=0
ROOTFS_ONLY=
while (($#)); do
  case "$1" in
    --force) FORCE=1 ;;
    --clients) CLIENTS=1 ;;
    --rootfs)
      [[ $# -ge 2 && -n "$2" ]] || { echo "build.sh: --rootfs needs a directory" >&2; exit 2; }
      ROOTFS_ONLY=$2; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument: $1" >&2; exit 2 ;;
  esac
  shift
done
KIND=test
((CLIENTS)) && KIND=test-clients
TAG="${SHELLBOX_TEST_IMAGE:-shellbox-$KIND:latest}"
if [[ -n "$ROOTFS_ONLY" ]]; then
  mkdir -p "$ROOTFS_ONLY"
  if [[ -n "$(ls -A "$ROOTFS_ONLY")" ]]; then
    echo "build.sh: --rootfs $ROOTFS_ONLY: directory is not empty" >&2; exit 2
  fi
fi

log() { echo "testimage: $*"; }

# Required tools: the build fails without any of them.
REQUIRED=(bash dash head tr wc cat sleep ls pwd env mkdir rm id dd yes seq touch
  chmod stat readlink tail sort grep sed setsid nohup timeout true false printf)
# Optional tools: copied when the host has them.
OPTIONAL=(cmp diff cp mv ln basename dirname uname tee cut uniq date du df find
  xargs mktemp realpath kill nproc sha256sum md5sum base64 expr test tac od
  hostname whoami logname mkfifo ps pgrep sync curl)

start=${EPOCHREALTIME/./}

# Concurrent builds (parallel test packages) queue up here; the second finds
# the image up to date instead of importing it again.
if [[ -z "$ROOTFS_ONLY" ]]; then
lock="${TMPDIR:-/tmp}/shellbox-testimage.lock"
if command -v flock >/dev/null && (exec 9>>"$lock") 2>/dev/null; then
  exec 9>>"$lock"
  chmod 0666 "$lock" 2>/dev/null || true
  flock 9
fi
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/shellbox-testimage.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="${ROOTFS_ONLY:-$work/rootfs}"

# usrmerge layout, as on Debian 12: the loader and libraries resolve through
# /lib and /lib64 whatever path ldd reports.
mkdir -p "$root"/usr/{bin,lib,lib64} "$root"/{etc,tmp,workspace,root,home/sandbox,dev,proc,sys,run,var/tmp}
ln -s usr/bin "$root/bin"
ln -s usr/bin "$root/sbin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
chmod 1777 "$root/tmp" "$root/var/tmp"
chmod 0700 "$root/root"

declare -A libs=()
add_libs() {
  local out line path
  # ldd of a static binary exits non-zero ("not a dynamic executable").
  out=$(ldd "$1" 2>/dev/null) || return 0
  while read -r line; do
    case "$line" in
      *"=> not found"*) echo "testimage: $1: missing library: $line" >&2; exit 1 ;;
      *"=> /"*) path=${line#*=> }; path=${path%% (*} ;;
      /*) path=${line%% (*} ;;
      *) continue ;;
    esac
    libs["$path"]=1
  done <<<"$out"
}

copy_tool() { # name required(0/1)
  local src
  src=$(type -P "$1" 2>/dev/null || true)
  if [[ -z "$src" ]]; then
    if [[ "$2" == 1 ]]; then echo "testimage: required tool not found on host: $1" >&2; exit 1; fi
    return 0
  fi
  cp -L "$src" "$root/usr/bin/$1"
  add_libs "$src"
}

for t in "${REQUIRED[@]}"; do copy_tool "$t" 1; done
for t in "${OPTIONAL[@]}"; do copy_tool "$t" 0; done

# add_tree_libs DIR: the libraries of every ELF file under DIR.
add_tree_libs() {
  local f
  while IFS= read -r -d '' f; do
    [[ "$(head -c 4 "$f")" == $'\x7fELF' ]] && add_libs "$f"
  done < <(find "$1" -type f -perm /111 -print0 -o -type f -name '*.so*' -print0)
}

# --clients: git, python3 with requests, node (see the header).
copy_clients() {
  local missing=() py ver pkg
  type -P git >/dev/null || missing+=(git)
  py=$(readlink -f /usr/bin/python3 2>/dev/null || true)
  [[ -x "$py" ]] || missing+=(python3)
  [[ -d /usr/lib/python3/dist-packages/requests ]] || missing+=(python3-requests)
  type -P node >/dev/null || missing+=(nodejs)
  [[ -d "/usr/lib/${py##*/}/ensurepip" ]] || missing+=(python3-venv)
  compgen -G '/usr/share/python-wheels/pip-*.whl' >/dev/null || missing+=(python3-pip-whl)
  if ((${#missing[@]})); then
    echo "testimage: --clients: the host lacks ${missing[*]} (Debian: apt-get install git python3-requests python3-venv python3-pip nodejs)" >&2
    exit 1
  fi
  copy_tool git 1
  copy_tool node 1
  # The test archives what the sandbox holds, to search it for the secret.
  copy_tool tar 1
  copy_tool gzip 1
  mkdir -p "$root/usr/lib" "$root/usr/share/git-core"
  # git's commands: links to git, scripts and helpers (git-remote-https).
  cp -a /usr/lib/git-core "$root/usr/lib/"
  cp -a /usr/share/git-core/templates "$root/usr/share/git-core/"
  add_tree_libs /usr/lib/git-core

  ver=${py##*/}
  cp -L "$py" "$root/usr/bin/$ver"
  ln -s "$ver" "$root/usr/bin/python3"
  add_libs "$py"
  # The stdlib without what no client needs; sitecustomize is a link to
  # /etc (Debian's apport hook), left out.
  tar -C /usr/lib -cf - --exclude=__pycache__ --exclude="$ver/test" \
    --exclude="$ver/idlelib" --exclude="$ver/tkinter" --exclude="$ver/turtledemo" \
    --exclude="$ver/lib2to3" --exclude="$ver/config-*" \
    --exclude="$ver/sitecustomize.py" --exclude='*/tests' "$ver" | tar -C "$root/usr/lib" -xf -
  add_tree_libs "$root/usr/lib/$ver/lib-dynload"
  # venv's pip: Debian's ensurepip installs the wheels of its
  # WHEEL_PKG_DIR (pip, setuptools; 3 MB).
  mkdir -p "$root/usr/share/python-wheels"
  cp /usr/share/python-wheels/*.whl "$root/usr/share/python-wheels/"
  mkdir -p "$root/usr/lib/python3/dist-packages"
  # Debian's urllib3 1.26 imports six.
  for pkg in requests urllib3 certifi idna charset_normalizer chardet six.py; do
    [[ -e /usr/lib/python3/dist-packages/$pkg ]] || continue
    tar -C /usr/lib/python3/dist-packages -cf - --exclude=__pycache__ "$pkg" |
      tar -C "$root/usr/lib/python3/dist-packages" -xf -
    add_tree_libs "/usr/lib/python3/dist-packages/$pkg"
  done
}
((CLIENTS)) && copy_clients

# threads-probe prints clone3's errno (for a size of 0: EINVAL where the
# kernel sees it, ENOSYS where a filter answers) and starts a thread with
# glibc's pthread_create, which tries clone3 first and falls back to clone
# only on ENOSYS. The sandbox suites run it on every engine and runtime:
# under gVisor threads failed (EPERM) until the agent's filter answered
# clone3 itself (agent/notrace). Static, built by the host's C compiler
# (the one cgo and -race use); without one the probe is left out and the
# suites say so (in CI they fail).
if cc=$(type -P cc || type -P gcc); then
  cat >"$work/threads-probe.c" <<'PROBE'
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
static void *run(void *arg) { return arg; }
int main(void) {
	long r = syscall(SYS_clone3, NULL, 0);
	printf("clone3: %s\n", r == -1 ? strerrorname_np(errno) : "ok");
	pthread_t t;
	int e = pthread_create(&t, NULL, run, NULL);
	if (e != 0) {
		printf("pthread_create: %s\n", strerrorname_np(e));
		return 1;
	}
	pthread_join(t, NULL);
	printf("thread: ok\n");
	return 0;
}
PROBE
  "$cc" -static -pthread -O2 -o "$root/usr/bin/threads-probe" "$work/threads-probe.c" ||
    { echo "testimage: $cc could not build threads-probe (static glibc: libc6-dev)" >&2; exit 1; }
else
  log "no C compiler: threads-probe left out"
fi
ln -s dash "$root/usr/bin/sh"

for lib in "${!libs[@]}"; do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

cat >"$root/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/bash
sandbox:x:1000:1000:sandbox:/home/sandbox:/bin/bash
nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin
PASSWD
cat >"$root/etc/group" <<'GROUP'
root:x:0:
sandbox:x:1000:
nogroup:x:65534:
GROUP
printf 'passwd: files\ngroup: files\nhosts: files dns\n' >"$root/etc/nsswitch.conf"
# Mount points Docker fills in; present so a read-only rootfs needs nothing.
: >"$root/etc/hosts"; : >"$root/etc/hostname"; : >"$root/etc/resolv.conf"

if [[ -n "$ROOTFS_ONLY" ]]; then
  ms=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
  log "rootfs in $ROOTFS_ONLY (${#libs[@]} libraries) in $((ms / 1000)).$(printf '%03d' $((ms % 1000)))s"
  exit 0
fi

# Deterministic tar: fixed order, mtime and owners. Everything is root's but
# the sandbox user's directories, appended with owner 1000 (no chown, so the
# script also works unprivileged).
tarball="$work/rootfs.tar"
tarflags=(--sort=name --mtime=@0 --numeric-owner --format=gnu)
tar -C "$root" "${tarflags[@]}" --owner=0 --group=0 \
  --exclude=./workspace --exclude=./home/sandbox -cf "$tarball" .
tar -C "$root" "${tarflags[@]}" --owner=1000 --group=1000 --no-recursion \
  -rf "$tarball" ./workspace ./home/sandbox
sum=$(sha256sum "$tarball" | cut -d' ' -f1)
size=$(du -k "$tarball" | cut -f1)

old=$("$DOCKER" image inspect -f '{{.Id}} {{index .Config.Labels "org.shellbox.rootfs.sha256"}}' "$TAG" 2>/dev/null || true)
if [[ "$FORCE" == 0 && "${old#* }" == "$sum" ]]; then
  log "$TAG is up to date (rootfs sha256 ${sum:0:12}, ${size} KiB); nothing imported"
else
  log "importing $TAG (${#libs[@]} libraries, ${size} KiB rootfs)"
  "$DOCKER" import \
    --change "LABEL org.shellbox.image=$KIND" \
    --change "LABEL org.shellbox.rootfs.sha256=$sum" \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'WORKDIR /workspace' \
    --change 'USER 1000:1000' \
    --change 'CMD ["/bin/bash"]' \
    --message "shellbox $KIND image (host binaries)" \
    "$tarball" "$TAG" >/dev/null
  # Drop the image this one replaced, unless something still uses it.
  if [[ -n "$old" && "${old%% *}" != "$("$DOCKER" image inspect -f '{{.Id}}' "$TAG")" ]]; then
    "$DOCKER" image rm "${old%% *}" >/dev/null 2>&1 || true
  fi
fi
ms=$(( (${EPOCHREALTIME/./} - start) / 1000 ))
log "done: $TAG in $((ms / 1000)).$(printf '%03d' $((ms % 1000)))s"
