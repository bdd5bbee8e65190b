#!/usr/bin/env bash
# Prepares a CI machine (Debian 12, root) to run shellbox's Docker tests:
#
#   1. makes sure dockerd answers (starts it in the background if not);
#   2. builds gVisor's runsc from the Go module proxy (toolchain.sh; cached in
#      /var/cache/shellbox-ci/gvisor-<version>/, the same build containerd's
#      gVisor shim uses), unless cached;
#   3. merges a "runsc" runtime into /etc/docker/daemon.json, keeping every
#      other setting, and reloads dockerd with SIGHUP;
#   4. builds the test image (images/testimage/build.sh) and the clients image
#      (build.sh --clients: git, python3 with requests, node, for the egress
#      credential tests; their Debian packages installed if missing) and
#      proves a container really runs under runsc (its kernel is gVisor's, not
#      the host's; ls -l and stat work), and still runs under runc.
#
# Idempotent: a second run builds nothing, changes nothing and reloads nothing.
#
# Not Debian's runsc (release 2022-12, ptrace only): under it `ls -l` and
# `stat` fail with EINVAL with coreutils >= 9 (statx), and a syscall costs
# ~28 us instead of ~4 us with systrap.
#
# Why these runsc flags (measured on kernel 6.18, Docker 20.10,
# fuse-overlayfs, cgroup v1; see images/README.md):
#   --platform=systrap  seccomp-based, needs neither KVM nor ptrace.
#                   --platform=kvm hung while the sandbox booted (sentry at
#                   100% CPU) on this VM with the 2022 release.
#   --network=none  required. Without it every container fails to start with
#                   "cannot run with network enabled in root network namespace",
#                   whatever Docker's --network. With it the sandbox has only
#                   loopback, which is what shellbox wants anyway.
#   --host-uds=create  required for the agent socket. The agent (PID 1 in the
#                   sandbox) listens on /run/shellbox/agent.sock, a bind mount
#                   of the session's host directory. With the default (none)
#                   the socket exists only inside gVisor and the host's
#                   connect fails with ENOENT; "create" makes the gofer create
#                   a real host socket (its mode follows the agent's umask,
#                   0600). "open" would let the sandbox connect to host
#                   sockets, which it does not need: not "all".
#   --oci-seccomp   apply the container's seccomp profile (Docker's default)
#                   inside the sandbox too; without it commands show Seccomp 0.
#                   (The sentry itself runs under seccomp on the host either way.)
#   no --ignore-cgroups, no --overlay: not needed; cgroup limits apply.
#
# Environment:
#   SHELLBOX_RUNSC_ARGS  JSON array of runtimeArgs (default
#                        ["--platform=systrap","--network=none","--host-uds=create","--oci-seccomp"])
#   SHELLBOX_CI_CACHE    build cache (default /var/cache/shellbox-ci)
#   DOCKER_DAEMON_JSON   daemon config file (default /etc/docker/daemon.json)
#   DOCKERD_LOG          log of a dockerd this script starts (default /var/log/dockerd.log)
#   SKIP_RUNSC=1         only make sure dockerd runs and build the test image
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
RUNSC_ARGS=${SHELLBOX_RUNSC_ARGS:-'["--platform=systrap","--network=none","--host-uds=create","--oci-seccomp"]'}
DAEMON_JSON=${DOCKER_DAEMON_JSON:-/etc/docker/daemon.json}
DOCKERD_LOG=${DOCKERD_LOG:-/var/log/dockerd.log}
TEST_IMAGE=${SHELLBOX_TEST_IMAGE:-shellbox-test:latest}
WAIT_SECONDS=60

CI_NAME=setup-docker
# shellcheck source=lib.sh
source "$ROOT/.ci/lib.sh"

docker_ok() { docker info >/dev/null 2>&1; }

# --- 1. dockerd -------------------------------------------------------------
step dockerd
if docker_ok; then
  log "dockerd is running"
else
  command -v dockerd >/dev/null || die "dockerd is not installed"
  log "docker info fails; starting dockerd (log: $DOCKERD_LOG)"
  mkdir -p "$(dirname "$DOCKERD_LOG")"
  setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  if ! wait_for "dockerd is up" "$WAIT_SECONDS" "" docker_ok; then
    tail -n 30 "$DOCKERD_LOG" >&2 || true
    die "dockerd did not answer within ${WAIT_SECONDS}s"
  fi
fi

# --- 2. the test image (needed by the checks below and by the tests) ---------
step test-image
# It copies the host's tools; the egress tests need its curl.
command -v curl >/dev/null || apt_install curl
"$ROOT/images/testimage/build.sh"
# The clients the credential and workload tests drive (cmd/shellbox
# TestServeCredentialClients, TestServeWorkloads).
apt_install git python3-requests python3-venv python3-pip nodejs
"$ROOT/images/testimage/build.sh" --clients

run_check() { # runtime -> prints the container's output
  docker run --rm --runtime="$1" --network none --label org.shellbox.test=1 \
    "$TEST_IMAGE" bash -c "$CHECK_SCRIPT"
}

out=$(run_check runc) || die "a runc container does not run: $out"
[[ "$out" == ok* ]] || die "unexpected runc output: $out"
log "runc container runs"

if [[ "${SKIP_RUNSC:-0}" == 1 ]]; then
  log "SKIP_RUNSC=1: not configuring gVisor"
  exit 0
fi

# --- 3. runsc -----------------------------------------------------------------
step runsc
# shellcheck source=toolchain.sh
source "$ROOT/.ci/toolchain.sh"
build_gvisor
RUNSC=$GVISOR_DIR/runsc
log "$("$RUNSC" --version | head -n 1) at $RUNSC"

# Merge {"runtimes": {"runsc": {...}}} into the daemon config; every other key
# (and every other runtime) is kept. Prints "changed" or "unchanged".
merge_py='
import json, os, sys
path, runsc, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
cfg = {}
if os.path.exists(path) and open(path).read().strip():
    cfg = json.load(open(path))
want = {"path": runsc, "runtimeArgs": args}
if cfg.get("runtimes", {}).get("runsc") == want:
    print("unchanged"); sys.exit(0)
cfg.setdefault("runtimes", {})["runsc"] = want
tmp = path + ".tmp"
with open(tmp, "w") as f:
    json.dump(cfg, f, indent=2); f.write("\n")
os.replace(tmp, path)
print("changed")
'
mkdir -p "$(dirname "$DAEMON_JSON")"
if command -v python3 >/dev/null; then
  state=$(python3 -c "$merge_py" "$DAEMON_JSON" "$RUNSC" "$RUNSC_ARGS")
elif command -v jq >/dev/null; then
  cur='{}'
  [[ -s "$DAEMON_JSON" ]] && cur=$(cat "$DAEMON_JSON")
  want=$(jq -n --arg p "$RUNSC" --argjson a "$RUNSC_ARGS" '{path: $p, runtimeArgs: $a}')
  if [[ $(jq --argjson w "$want" '.runtimes.runsc == $w' <<<"$cur") == true ]]; then
    state=unchanged
  else
    jq --argjson w "$want" '.runtimes.runsc = $w' <<<"$cur" >"$DAEMON_JSON.tmp"
    mv "$DAEMON_JSON.tmp" "$DAEMON_JSON"
    state=changed
  fi
else
  die "need python3 or jq to edit $DAEMON_JSON"
fi
log "$DAEMON_JSON: $state"

# True when the running daemon reports the runsc runtime with our settings.
runtime_loaded() {
  local rts
  rts=$(docker info --format '{{json .Runtimes}}' 2>/dev/null) || return 1
  if command -v python3 >/dev/null; then
    python3 -c '
import json, sys
rt = json.load(sys.stdin).get("runsc") or {}
sys.exit(0 if rt.get("path") == sys.argv[1] and (rt.get("runtimeArgs") or []) == json.loads(sys.argv[2]) else 1)
' "$RUNSC" "$RUNSC_ARGS" <<<"$rts"
  else
    jq -e --arg p "$RUNSC" --argjson a "$RUNSC_ARGS" \
      '.runsc.path == $p and ((.runsc.runtimeArgs // []) == $a)' <<<"$rts" >/dev/null
  fi
}

if runtime_loaded; then
  log "dockerd already has the runsc runtime"
else
  pid=""
  [[ -s /var/run/docker.pid ]] && pid=$(cat /var/run/docker.pid)
  if [[ -z "$pid" ]] || ! kill -0 "$pid" 2>/dev/null; then
    pid=$(pidof dockerd || true)
  fi
  [[ "$pid" =~ ^[0-9]+$ ]] || die "cannot find dockerd's pid to reload it (got: '$pid')"
  log "reloading dockerd (kill -HUP $pid)"
  kill -HUP "$pid"
  if ! wait_for "dockerd lists the runsc runtime" "$WAIT_SECONDS" "" runtime_loaded; then
    tail -n 30 "$DOCKERD_LOG" >&2 2>/dev/null || true
    die "dockerd did not pick up the runsc runtime; docker info says: $(docker info --format '{{json .Runtimes}}')"
  fi
fi

# --- 4. prove it ---------------------------------------------------------------
step check
if ! out=$(run_check runsc 2>&1); then
  echo "$out" >&2
  die "a container does not run under runsc with runtimeArgs $RUNSC_ARGS"
fi
check_gvisor "$out"
step done
log "steps: ${CI_STEPS[*]}"
log "done"
