#!/usr/bin/env bash
# Stops the containerd daemon .ci/setup-containerd.sh started, for developers:
#
#   1. kills and deletes every running task (container process) it manages,
#      in every namespace, so no shim keeps a container alive;
#   2. stops containerd (SIGTERM, SIGKILL after 10 s) and any shim of it still
#      running;
#   3. unmounts whatever is still mounted under its root
#      (/var/lib/shellbox-containerd) and state (/run/shellbox-containerd).
#
# Images, snapshots and container records stay in /var/lib/shellbox-containerd,
# so the next setup-containerd.sh starts in about a second. --purge also
# deletes that root, the state dir and /etc/shellbox-containerd. The build
# cache (/var/cache/shellbox-ci) is kept either way. Docker and its containerd
# are not touched. Safe to run twice.
#
# Usage: teardown-containerd.sh [--purge]
set -euo pipefail

# The directories setup-containerd.sh uses; overridable only to try this
# script on a throwaway daemon.
ROOT_DIR=${SHELLBOX_CONTAINERD_ROOT:-/var/lib/shellbox-containerd}
RUN_DIR=${SHELLBOX_CONTAINERD_RUN:-/run/shellbox-containerd}
CONF_DIR=${SHELLBOX_CONTAINERD_CONF:-/etc/shellbox-containerd}
SOCK=$RUN_DIR/containerd.sock
PID_FILE=$RUN_DIR/containerd.pid
SHELLBOX_CI_CACHE=${SHELLBOX_CI_CACHE:-/var/cache/shellbox-ci}

CI_NAME=teardown-containerd
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

purge_flag "$@"
[[ $(id -u) == 0 ]] || die "must run as root"

CTR=$(ls "$SHELLBOX_CI_CACHE"/containerd-*/ctr 2>/dev/null | sort | tail -n 1 || true)
# ctr_ ARGS: ctr on this daemon.
ctr_() { quiet_ctr "$CTR" --address "$SOCK" "$@"; }

# --- 1. tasks -------------------------------------------------------------------
if [[ -n "$CTR" ]] && timeout 5 "$CTR" --address "$SOCK" version >/dev/null 2>&1; then
  for ns in $(ctr_ namespaces ls -q); do
    for task in $(ctr_ -n "$ns" tasks ls -q); do
      timeout 10 "$CTR" --address "$SOCK" -n "$ns" tasks kill -a -s SIGKILL "$task" >/dev/null 2>&1 || true
      if timeout 20 "$CTR" --address "$SOCK" -n "$ns" tasks delete -f "$task" >/dev/null 2>&1; then
        log "killed task $ns/$task"
      else
        log "could not delete task $ns/$task (its shim is stopped below)"
      fi
    done
  done
fi

# --- 2. the daemon and its shims ----------------------------------------------------
# Only a containerd on setup-containerd.sh's config: a recycled pid (Docker's
# containerd above all) is left alone.
pid=""
[[ -s "$PID_FILE" ]] && pid=$(<"$PID_FILE")
cmdline=""
[[ "$pid" =~ ^[0-9]+$ ]] && cmdline=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)
if [[ "$cmdline" == *containerd*" --config $CONF_DIR/config.toml "* ]]; then
  stop_pid "$pid" containerd 10
  for ((i = 0; i < 50; i++)); do pid_alive "$pid" && sleep 0.1; done
  ! pid_alive "$pid" || die "containerd (pid $pid) survives SIGKILL"
  log "stopped containerd (pid $pid)"
else
  log "containerd is not running (no live pid in $PID_FILE)"
fi
rm -f "$PID_FILE" "$SOCK"

# Shims outlive containerd by design; this daemon's carry "-address $SOCK".
for dir in /proc/[0-9]*; do
  cmdline=$({ tr '\0' ' ' <"$dir/cmdline"; } 2>/dev/null) || continue
  case "$cmdline" in
    *containerd-shim*"-address $SOCK "*)
      shim=${dir#/proc/}
      kill -KILL "$shim" 2>/dev/null && log "killed shim pid $shim" || true
      ;;
  esac
done

# --- 3. mounts ----------------------------------------------------------------------
# Deepest first; mountinfo escapes spaces as \040.
mapfile -t mounts < <(mounts_under "$ROOT_DIR" "$RUN_DIR")
left=0
for m in "${mounts[@]}"; do
  if umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; then
    log "unmounted $m"
  else
    log "cannot unmount $m"
    left=1
  fi
done

if ((PURGE)); then
  # rm -rf through a mount would delete what it shows
  ((left == 0)) || die "not purging: mounts remain under $ROOT_DIR or $RUN_DIR"
  rm -rf "$ROOT_DIR" "$RUN_DIR" "$CONF_DIR"
  log "purged $ROOT_DIR, $RUN_DIR and $CONF_DIR (the build cache $SHELLBOX_CI_CACHE stays)"
fi
log "done"
