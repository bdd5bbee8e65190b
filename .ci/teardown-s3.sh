#!/usr/bin/env bash
# Stops the S3 server (SeaweedFS's weed) .ci/setup-s3.sh started, for
# developers: SIGTERM, SIGKILL after 20 s. Its data (/var/lib/shellbox-s3)
# and identities (/etc/shellbox-s3) stay, so the next setup-s3.sh starts in
# a few seconds with the same keys; --purge also deletes them. The build
# cache (/var/cache/shellbox-ci) is kept either way. Safe to run twice.
#
# Usage: teardown-s3.sh [--purge]
set -euo pipefail

DATA_DIR=/var/lib/shellbox-s3
RUN_DIR=/run/shellbox-s3
CONF_DIR=/etc/shellbox-s3
PID_FILE=$RUN_DIR/weed.pid

CI_NAME=teardown-s3
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

purge_flag "$@"
[[ $(id -u) == 0 ]] || die "must run as root"

# Only a weed on setup-s3.sh's data dir: a recycled pid is left alone.
pid=""
[[ -s "$PID_FILE" ]] && pid=$(<"$PID_FILE")
cmdline=""
[[ "$pid" =~ ^[0-9]+$ ]] && cmdline=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null || true)
if [[ "$cmdline" == *weed*" -dir=$DATA_DIR "* ]] && pid_alive "$pid"; then
  stop_pid "$pid" weed 20
  ! pid_alive "$pid" || die "weed (pid $pid) survives SIGKILL"
  log "stopped weed (pid $pid)"
else
  log "weed is not running (no live pid in $PID_FILE)"
fi
rm -rf "$RUN_DIR"

if ((PURGE)); then
  rm -rf "$DATA_DIR" "$CONF_DIR"
  log "purged $DATA_DIR and $CONF_DIR (the build cache stays)"
fi
log "done"
