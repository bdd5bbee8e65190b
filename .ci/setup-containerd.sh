#!/usr/bin/env bash
# Prepares a CI machine (Debian 12, root, no systemd) to run shellbox's
# containerd tests, beside Docker and never touching Docker's containerd
# (/var/run/docker/containerd) or /etc/containerd:
#
#   1. installs Debian's runc if missing;
#   2. builds containerd v2.4.2 (containerd, containerd-shim-runc-v2, ctr) and
#      gVisor (runsc, containerd-shim-runsc-v1, patched: see toolchain.sh) from
#      the Go module proxy, cached in /var/cache/shellbox-ci/ (built once);
#   3. writes its own config to /etc/shellbox-containerd/: config.toml for
#      containerd, runsc.toml for gVisor's shim;
#   4. starts containerd (setsid, pid file) unless its socket answers, and
#      restarts it when its binary or config changed;
#   5. imports the test image shellbox-test:latest from Docker (built by
#      images/testimage/build.sh, which setup-docker.sh runs) into namespace
#      shellbox; on a host without Docker (or with
#      SHELLBOX_CI_TEST_IMAGE_FROM=shellbox) builds it for containerd with
#      `shellbox image build --test --containerd` instead; and the clients
#      image shellbox-test-clients:latest from Docker when Docker has it
#      (build.sh --clients: the credential tests' git, python3, node);
#   6. proves a container runs under runc and under gVisor (its kernel is not
#      the host's; ls -l and stat work).
#
# Idempotent: a second run builds nothing, restarts nothing and imports
# nothing. The daemon keeps running; .ci/teardown-containerd.sh stops it.
#
# The daemon:
#   socket    /run/shellbox-containerd/containerd.sock  (tests: SHELLBOX_CONTAINERD_ADDRESS)
#   root      /var/lib/shellbox-containerd
#   state     /run/shellbox-containerd/state
#   pid, log  /run/shellbox-containerd/containerd.pid, /var/log/shellbox-containerd.log
#   runtimes  io.containerd.runc.v2 (Debian runc) and io.containerd.runsc.v1 (gVisor)
#   snapshotter overlayfs (the kernel's; Docker here uses fuse-overlayfs, containerd need not)
#
# How a client picks gVisor's flags: containerd reads per-runtime options only
# for its CRI plugin (Kubernetes), which shellbox does not use and this config
# disables. A client of the containerd API sends them with each container:
# gVisor's shim reads runsc's flags from the TOML file named by the runtime
# options' ConfigPath (type runtimeoptions.v1.Options), here
# /etc/shellbox-containerd/runsc.toml (tests: SHELLBOX_CONTAINERD_RUNSC_CONFIG);
# with no options runsc gets no flags (no --network=none, no --host-uds).
# ctr: --runtime io.containerd.runsc.v1 --runtime-config-path <that file>.
# For runc, clients pass runc options with Root /run/shellbox-containerd/runc
# (ctr: --runc-root) so runc's state stays under this daemon's dirs.
#
# The runsc flags are the ones shellbox's Docker runtime uses (setup-docker.sh
# explains each): platform systrap, network none (loopback only),
# host-uds create (the host connects to the agent's socket in the bind-mounted
# session dir), oci-seccomp (the container's seccomp profile applies inside).
#
# Environment:
#   SHELLBOX_CI_CACHE         build cache (default /var/cache/shellbox-ci)
#   SHELLBOX_CI_REBUILD=1     rebuild containerd and gVisor
#   SHELLBOX_TEST_IMAGE       image to import (default shellbox-test:latest)
#   SHELLBOX_CI_TEST_IMAGE_FROM  docker (default when Docker has the image) or
#                             shellbox (built here by shellbox's own image build)
#   SHELLBOX_CONTAINERD_SNAPSHOTTER  (default overlayfs)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

CI_NAME=setup-containerd
# shellcheck source=lib.sh
source "$HERE/lib.sh"
# shellcheck source=toolchain.sh
source "$HERE/toolchain.sh"

NAMESPACE=shellbox
CONF_DIR=/etc/shellbox-containerd
CONFIG=$CONF_DIR/config.toml
RUNSC_CONFIG=$CONF_DIR/runsc.toml
ROOT_DIR=/var/lib/shellbox-containerd
RUN_DIR=/run/shellbox-containerd
STATE_DIR=$RUN_DIR/state
SOCK=$RUN_DIR/containerd.sock
PID_FILE=$RUN_DIR/containerd.pid
LOG_FILE=/var/log/shellbox-containerd.log
RUNC_ROOT=$RUN_DIR/runc
RUNSC_ROOT=$RUN_DIR/runsc
TEST_IMAGE=${SHELLBOX_TEST_IMAGE:-shellbox-test:latest}
CLIENTS_IMAGE=shellbox-test-clients:latest
SNAPSHOTTER=${SHELLBOX_CONTAINERD_SNAPSHOTTER:-overlayfs}
START_SECONDS=30

[[ $(id -u) == 0 ]] || die "must run as root (it starts a containerd daemon)"
command -v go >/dev/null || die "go is not installed (looked in PATH and /usr/local/go/bin)"
for tool in flock perl setsid; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done

# --- 1. runc ------------------------------------------------------------------
step runc
command -v runc >/dev/null || apt_install runc
RUNC=$(command -v runc)
log "$("$RUNC" --version | head -n 1) at $RUNC"

# --- 2. binaries --------------------------------------------------------------
step binaries
build_containerd
build_gvisor
CTR=$CONTAINERD_DIR/ctr
# ctr_: ctr on this daemon and namespace, without the warning every ctr
# command prints on a cgroup v1 host ("DEPRECATION: The support for cgroup v1").
ctr_() { quiet_ctr "$CTR" --address "$SOCK" --namespace "$NAMESPACE" "$@"; }

# --- 3. config ------------------------------------------------------------------
step config
mkdir -p "$CONF_DIR" "$ROOT_DIR" "$STATE_DIR"
chmod 0711 "$ROOT_DIR" "$RUN_DIR"

write_file 0644 "$CONFIG" <<EOF
# containerd for shellbox's tests and single-host users; written by
# .ci/setup-containerd.sh (edits are overwritten). Docker's containerd is a
# different daemon (/var/run/docker/containerd) and is not touched.
version = 3
root = "$ROOT_DIR"
state = "$STATE_DIR"
# No oom_score: root on this machine lacks CAP_SYS_RESOURCE and cannot lower it.

# shellbox talks to containerd's own API. The CRI plugins (Kubernetes) would
# add a streaming server, CNI and a pause image, none of which it uses; NRI
# would listen on the shared /var/run/nri/nri.sock.
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.cri.v1.images",
  "io.containerd.cri.v1.runtime",
  "io.containerd.podsandbox.controller.v1.podsandbox",
  "io.containerd.nri.v1.nri",
]

[grpc]
  address = "$SOCK"

[ttrpc]
  address = ""

[debug]
  # no debug socket (its default would be /run/containerd/debug.sock)
  address = ""
  level = "info"

[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    # default /opt/containerd
    path = "$ROOT_DIR/opt"
  [plugins.'io.containerd.shim.v1.manager']
    # default /run/containerd/s, shared with any other containerd
    socket_dir = "$RUN_DIR/s"
EOF
config_changed=$FILE_CHANGED
((!config_changed)) || log "wrote $CONFIG"

write_file 0644 "$RUNSC_CONFIG" <<EOF
# gVisor's containerd shim (containerd-shim-runsc-v1) reads this file when a
# container is created with runtime io.containerd.runsc.v1 and runtime options
# {ConfigPath: "$RUNSC_CONFIG"}. Written by .ci/setup-containerd.sh.
binary_name = "$GVISOR_DIR/runsc"
root = "$RUNSC_ROOT"

# runsc's command-line flags, without the dashes.
[runsc_config]
  platform = "systrap"
  network = "none"
  host-uds = "create"
  oci-seccomp = "true"
EOF
((!FILE_CHANGED)) || log "wrote $RUNSC_CONFIG"

# --- 4. the daemon ------------------------------------------------------------
step daemon
daemon_answers() { timeout 5 "$CTR" --address "$SOCK" version >/dev/null 2>&1; }

# daemon_pid: the recorded pid if it is alive and is a containerd running on
# this config (a recycled pid, Docker's containerd above all, is never ours).
daemon_pid() {
  local pid exe cmdline
  [[ -s "$PID_FILE" ]] || return 0
  pid=$(<"$PID_FILE")
  pid_alive "$pid" || return 0
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
  cmdline=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || return 0
  if [[ "$(basename "${exe% (deleted)}")" == containerd && "$cmdline" == *" --config $CONFIG "* ]]; then
    echo "$pid"
  fi
}

stop_daemon() { stop_pid "$1" containerd 10; }

pid=$(daemon_pid)
if [[ -n "$pid" ]]; then
  exe=$(readlink "/proc/$pid/exe")
  if [[ "$exe" != "$CONTAINERD_DIR/containerd" ]]; then
    log "containerd (pid $pid) runs $exe, not $CONTAINERD_DIR/containerd: restarting it"
    stop_daemon "$pid"; pid=""
  elif ((config_changed)); then
    log "config changed: restarting containerd (pid $pid); running containers keep running"
    stop_daemon "$pid"; pid=""
  fi
fi

if [[ -n "$pid" ]] && daemon_answers; then
  log "containerd is running (pid $pid, $SOCK)"
else
  if [[ -n "$pid" ]]; then
    log "containerd (pid $pid) does not answer on $SOCK; restarting it"
    stop_daemon "$pid"
  elif daemon_answers; then
    die "something answers on $SOCK but $PID_FILE names no containerd; stop it first (.ci/teardown-containerd.sh)"
  fi
  rm -f "$SOCK"
  mkdir -p "$(dirname "$LOG_FILE")"
  echo "=== $(date -u +%FT%TZ) setup-containerd: starting $CONTAINERD_DIR/containerd --config $CONFIG" >>"$LOG_FILE"
  # PATH: containerd finds its shims (runc, runsc) there, and the runc shim its runc.
  PATH="$CONTAINERD_DIR:$GVISOR_DIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    setsid nohup "$CONTAINERD_DIR/containerd" --config "$CONFIG" >>"$LOG_FILE" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PID_FILE"
  rc=0
  wait_for "started containerd $CONTAINERD_VERSION (pid $pid); log: $LOG_FILE" "$START_SECONDS" "pid_alive $pid" daemon_answers || rc=$?
  if ((rc)); then
    tail -n 30 "$LOG_FILE" >&2
    ((rc == 1)) || die "containerd exited at start (log above, all of it in $LOG_FILE)"
    die "containerd (pid $pid) did not answer on $SOCK within ${START_SECONDS}s (log: $LOG_FILE)"
  fi
fi

# --- 5. the test image ----------------------------------------------------------
step test-image
# Docker's copy is the one the Docker suites use; the containerd image carries
# its Docker image ID as a label, so an unchanged image is not imported again.
# Two names: ctr import normalizes to docker.io/library/..., and the plain one
# is what policies and tests name.
#
# Without Docker, shellbox builds the image itself (images.BuildTestImage:
# the same rootfs as images/testimage/build.sh, written as an OCI archive,
# imported with containerd's client and unpacked; both names; nothing
# imported when containerd already has that very image). That is not the
# default: `go run` compiles cmd/shellbox without -race first, which the
# tests' -race build does not share (from an empty build cache 67 s of CPU,
# ~3 min here on two busy cores; warm, the whole step is ~4 s), while
# docker save | ctr import takes ~0.8-2 s and nothing when unchanged.

# import_from_docker IMAGE: docker save | ctr import, under both names,
# labelled with the Docker image ID; nothing when containerd has that very
# image under both names already.
import_from_docker() {
  local image=$1 full docker_id name t0
  full=$image
  if [[ "$image" != */* ]]; then full=docker.io/library/$image; fi
  docker_id=$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null) ||
    die "Docker has no $image; build it with images/testimage/build.sh (setup-docker.sh runs it)"
  image_current() { # name
    ctr_ images ls "name==$1" 2>/dev/null | grep -qF "org.shellbox.docker-id=$docker_id"
  }
  if image_current "$image" && image_current "$full"; then
    log "$image is imported (Docker image ${docker_id:7:12})"
    return
  fi
  t0=${EPOCHREALTIME/./}
  docker save "$image" | ctr_ images import --snapshotter "$SNAPSHOTTER" - >/dev/null ||
    die "importing $image into containerd (namespace $NAMESPACE) failed"
  ctr_ images ls -q "name==$full" | grep -qxF "$full" ||
    die "after the import containerd has no image $full: $(ctr_ images ls -q | tr '\n' ' ')"
  if [[ "$full" != "$image" ]]; then
    ctr_ images tag --force "$full" "$image" >/dev/null || die "cannot tag $full as $image"
  fi
  for name in "$full" "$image"; do
    ctr_ images label "$name" "org.shellbox.docker-id=$docker_id" >/dev/null || die "cannot label $name"
  done
  log "imported $image (Docker image ${docker_id:7:12}) as $image and $full in $(elapsed "$t0")s"
}

full_name=$TEST_IMAGE
if [[ "$TEST_IMAGE" != */* ]]; then full_name=docker.io/library/$TEST_IMAGE; fi
FROM=${SHELLBOX_CI_TEST_IMAGE_FROM:-}
if [[ -z "$FROM" ]]; then
  FROM=shellbox
  if command -v docker >/dev/null && docker image inspect "$TEST_IMAGE" >/dev/null 2>&1; then FROM=docker; fi
fi
case "$FROM" in
docker)
  command -v docker >/dev/null || die "docker is needed to export $TEST_IMAGE (run .ci/setup-docker.sh first)"
  import_from_docker "$TEST_IMAGE"
  ;;
shellbox)
  log "building $TEST_IMAGE for containerd: shellbox image build --test --containerd"
  t0=${EPOCHREALTIME/./}
  (cd "$HERE/.." && SHELLBOX_CONTAINERD_ADDRESS=$SOCK SHELLBOX_CONTAINERD_NAMESPACE=$NAMESPACE \
    SHELLBOX_CONTAINERD_SNAPSHOTTER=$SNAPSHOTTER go run ./cmd/shellbox image build --test --containerd --tag "$TEST_IMAGE") ||
    die "shellbox image build --test --containerd failed"
  for name in "$TEST_IMAGE" "$full_name"; do
    ctr_ images ls -q "name==$name" | grep -qxF "$name" ||
      die "after the build containerd has no image $name: $(ctr_ images ls -q | tr '\n' ' ')"
  done
  log "$TEST_IMAGE is in containerd as $TEST_IMAGE and $full_name ($(elapsed "$t0")s, compiling included)"
  ;;
*) die "SHELLBOX_CI_TEST_IMAGE_FROM=$FROM: want docker or shellbox" ;;
esac

# The clients image (git, python3 with requests, node: build.sh --clients,
# which setup-docker.sh runs) for cmd/shellbox TestServeCredentialClients
# on containerd. It is made from the host's own clients, so only Docker's
# copy exists: without Docker, or before setup-docker.sh built it, nothing
# is imported and that test says so (fails under CI=true).
if command -v docker >/dev/null && docker image inspect "$CLIENTS_IMAGE" >/dev/null 2>&1; then
  import_from_docker "$CLIENTS_IMAGE"
else
  log "Docker has no $CLIENTS_IMAGE: not imported (images/testimage/build.sh --clients builds it)"
fi

# --- 6. prove it ------------------------------------------------------------------
step check

run_check() { # runtime, ctr flags... -> prints the container's output (stdout, then stderr)
  local rt=$1 id err rc=0
  shift
  id="shellbox-test-setup-$rt-$$"
  err=$(mktemp)
  ctr_ run --rm --label org.shellbox.test=1 --snapshotter "$SNAPSHOTTER" "$@" \
    "$TEST_IMAGE" "$id" bash -c "$CHECK_SCRIPT" 2>"$err" || rc=$?
  cat "$err"
  rm -f "$err"
  return "$rc"
}

out=$(run_check runc --runtime io.containerd.runc.v2 --runc-root "$RUNC_ROOT") ||
  die "a container does not run under runc: $out"
[[ "$out" == ok* ]] && grep -qx ls-stat-ok <<<"$out" || die "unexpected runc output: $out"
log "runc container runs ($SNAPSHOTTER snapshotter)"

# Exit status 128 with the whole output is a known race of gVisor's shim, not
# a failure to run: it learns the exit status from `runsc wait`, started after
# `runsc start` returns; when the container's first process has already exited
# and taken the sandbox with it, that wait fails and the shim reports 128
# ("Failed to wait for container" in the log). It hits only containers whose
# first process ends within milliseconds (`ctr run --rm ... true` got 128 in
# 16 of 17 runs here), never an agent, which is the first process for good.
rc=0
out=$(run_check runsc --runtime io.containerd.runsc.v1 --runtime-config-path "$RUNSC_CONFIG") || rc=$?
if ((rc == 128)) && grep -qx ls-stat-ok <<<"$out"; then
  log "runsc check: exit status 128 after a complete run (gVisor shim's wait race, see the comment here)"
elif ((rc != 0)); then
  die "a container does not run under runsc (gVisor), exit status $rc: $out (shim log: $LOG_FILE)"
fi
check_gvisor "$out"
step done
log "steps: ${CI_STEPS[*]}"
log "done: export SHELLBOX_CONTAINERD_ADDRESS=$SOCK SHELLBOX_CONTAINERD_RUNSC_CONFIG=$RUNSC_CONFIG"
