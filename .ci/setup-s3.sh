#!/usr/bin/env bash
# Prepares a CI machine (Debian 12, root, no systemd) to run shellbox's
# S3 snapshot-store tests against a real S3 server, SeaweedFS (Apache-2.0;
# MinIO's server is AGPL and is not used):
#
#   1. builds SeaweedFS's `weed` from the Go module proxy at a pinned
#      pseudo-version, cached in /var/cache/shellbox-ci/ (built once);
#   2. writes its S3 identities to /etc/shellbox-s3/s3.json (one admin
#      identity, keys generated once and kept) and the tests' environment to
#      /etc/shellbox-s3/env;
#   3. starts `weed server -s3` (master, volume server, filer and S3 gateway
#      in one process; setsid, pid file) on 127.0.0.1 only, unless it answers,
#      and restarts it when its binary or identities changed;
#   4. proves it: an unsigned request is refused, a signed one answers.
#
# Idempotent: a second run builds nothing and restarts nothing. The server
# keeps running; .ci/teardown-s3.sh stops it.
#
# The server:
#   S3        http://127.0.0.1:8333            (tests: SHELLBOX_S3_ENDPOINT)
#   others    master 9340, volume 8340, filer 8341, their gRPC at +10000;
#             all on 127.0.0.1, all below the ephemeral port range
#   data      /var/lib/shellbox-s3             (volumes, filer and master metadata)
#   pid, log  /run/shellbox-s3/weed.pid, /var/log/shellbox-s3.log
#
# The tests' environment, written to /etc/shellbox-s3/env as export lines
# (.ci/run sources it before the test phase):
#   SHELLBOX_S3_ENDPOINT    host:port of the S3 API, plain HTTP
#   SHELLBOX_S3_ACCESS_KEY, SHELLBOX_S3_SECRET_KEY
#   SHELLBOX_S3_BUCKET      a prefix: each test makes buckets of its own
#                           named after it and deletes them at its end
#
# Environment:
#   SHELLBOX_CI_CACHE         build cache (default /var/cache/shellbox-ci)
#   SHELLBOX_CI_REBUILD=1     rebuild weed
#   SHELLBOX_S3_BUILD_ONLY=1  only build weed: nothing written, nothing
#                             started (.ci/run does that in the background,
#                             beside the other setup)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

CI_NAME=setup-s3
# shellcheck source=lib.sh
source "$HERE/lib.sh"

# SeaweedFS tags releases as 4.x, but its module path has no /v4: the proxy
# serves its commits only as pseudo-versions (4.53's tree).
SEAWEEDFS_MODULE=github.com/seaweedfs/seaweedfs
SEAWEEDFS_VERSION=v0.0.0-20261109003541-7506e5f91cd6
SEAWEEDFS_COMMIT=${SEAWEEDFS_VERSION##*-}

SHELLBOX_CI_CACHE=${SHELLBOX_CI_CACHE:-/var/cache/shellbox-ci}
# Compiled without optimizations or inlining: the server serves the
# tests' few hundred MiB, and the build is the cold CI's second largest
# (1,478 packages beside the Kubernetes build on the same 2 cores):
# weed/filer's 526 packages took 73 s of CPU so against 93 s optimized
# (docs/testing.md#the-ci-budget). The flags are part of the cache's name.
WEED_GCFLAGS="all=-N -l"
WEED_DIR=$SHELLBOX_CI_CACHE/seaweedfs-$SEAWEEDFS_VERSION-noopt
WEED=$WEED_DIR/weed
CONF_DIR=/etc/shellbox-s3
IDENTITIES=$CONF_DIR/s3.json
ENV_FILE=$CONF_DIR/env
DATA_DIR=/var/lib/shellbox-s3
RUN_DIR=/run/shellbox-s3
PID_FILE=$RUN_DIR/weed.pid
LOG_FILE=/var/log/shellbox-s3.log
IP=127.0.0.1
S3_PORT=8333
MASTER_PORT=9340
VOLUME_PORT=8340
FILER_PORT=8341
ENDPOINT=$IP:$S3_PORT
BUCKET_PREFIX=shellbox-test
START_SECONDS=60
BUILD_ONLY=${SHELLBOX_S3_BUILD_ONLY:-0}

export PATH="/usr/local/go/bin:$PATH"
[[ $(id -u) == 0 ]] || die "must run as root (it writes /etc, /var/lib and /run)"
command -v go >/dev/null || die "go is not installed (looked in PATH and /usr/local/go/bin)"
for tool in flock setsid; do
  command -v "$tool" >/dev/null || die "$tool is not installed"
done

# --- 1. weed ----------------------------------------------------------------------
step binary

# weed_ok DIR: DIR's weed runs and names the pinned commit.
weed_ok() {
  [[ -e "$1/.complete" ]] || return 1
  grep -qF " $SEAWEEDFS_COMMIT " <<<"$("$1/weed" version 2>/dev/null) "
}

# _build_weed TMP: a scratch module requiring the pinned SeaweedFS, with its
# replace directives (a dependency's are ignored, and one of them stands in
# for a repository that no longer exists), building weed into TMP/bin.
_build_weed() {
  local tmp=$1 gomod r
  go_get_module "$tmp" "$SEAWEEDFS_MODULE" "$SEAWEEDFS_VERSION"
  gomod=$(cd "$tmp/src" && go mod download -json "$SEAWEEDFS_MODULE@$SEAWEEDFS_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -s "$gomod" ]] || die "cannot read SeaweedFS's go.mod from the module cache"
  for r in $(sed -n 's/^replace[[:space:]]\{1,\}\(.*\) => \(.*\) \(v[^ ]*\)$/\1=\2@\3/p' "$gomod"); do
    (cd "$tmp/src" && go mod edit -replace="$r") || return 1
  done
  BUILD_GCFLAGS=$WEED_GCFLAGS build_in_module "$tmp/src" "-s -w -X $SEAWEEDFS_MODULE/weed/util/version.COMMIT=$SEAWEEDFS_COMMIT" "$tmp/bin" \
    "$SEAWEEDFS_MODULE/weed" || return 1
  touch "$tmp/bin/.complete"
}

build_cached "SeaweedFS $SEAWEEDFS_VERSION (weed)" "$WEED_DIR" weed_ok _build_weed
if [[ "$BUILD_ONLY" == 1 ]]; then
  step done
  log "steps: ${CI_STEPS[*]}"
  log "SHELLBOX_S3_BUILD_ONLY=1: weed built, nothing started"
  exit 0
fi

# --- 2. identities and the tests' environment ---------------------------------------
step config
# curl (SigV4 since 7.75) checks the server; not in the background build:
# apt-get would meet the foreground's on dpkg's lock.
command -v curl >/dev/null || apt_install curl
mkdir -p "$CONF_DIR" "$DATA_DIR" "$RUN_DIR"
chmod 0700 "$CONF_DIR" "$DATA_DIR"

# Keys are generated once and kept: a rerun must not restart the server for
# new keys, and tests of an earlier shell keep working.
ACCESS_KEY="" SECRET_KEY=""
if [[ -s "$ENV_FILE" ]]; then
  ACCESS_KEY=$(sed -n 's/^export SHELLBOX_S3_ACCESS_KEY=\(.*\)$/\1/p' "$ENV_FILE")
  SECRET_KEY=$(sed -n 's/^export SHELLBOX_S3_SECRET_KEY=\(.*\)$/\1/p' "$ENV_FILE")
fi
if [[ ! "$ACCESS_KEY" =~ ^[A-Z0-9]{20}$ || ! "$SECRET_KEY" =~ ^[a-f0-9]{40}$ ]]; then
  ACCESS_KEY=SBX$(head -c 64 /dev/urandom | od -An -tx1 | tr -d ' \n' | tr a-f A-F | head -c 17)
  SECRET_KEY=$(head -c 20 /dev/urandom | od -An -tx1 | tr -d ' \n')
fi

# Admin: the tests create and delete buckets of their own.
write_file 0600 "$IDENTITIES" <<EOF
{
  "identities": [
    {
      "name": "shellbox-ci",
      "credentials": [{"accessKey": "$ACCESS_KEY", "secretKey": "$SECRET_KEY"}],
      "actions": ["Admin", "Read", "List", "Tagging", "Write"]
    }
  ]
}
EOF
config_changed=$FILE_CHANGED
((!config_changed)) || log "wrote $IDENTITIES"

write_file 0600 "$ENV_FILE" <<EOF
# The S3 server of .ci/setup-s3.sh, for shellbox's snapshot-store tests.
export SHELLBOX_S3_ENDPOINT=$ENDPOINT
export SHELLBOX_S3_ACCESS_KEY=$ACCESS_KEY
export SHELLBOX_S3_SECRET_KEY=$SECRET_KEY
export SHELLBOX_S3_BUCKET=$BUCKET_PREFIX
EOF
((!FILE_CHANGED)) || log "wrote $ENV_FILE"

# --- 3. the server ------------------------------------------------------------------
step server

# s3_refuses: the S3 port answers, and refuses an unsigned listing (403):
# the gateway is up with the identities loaded, not anonymous.
s3_refuses() {
  [[ "$(curl -s -o /dev/null -m 5 -w '%{http_code}' "http://$ENDPOINT/")" == 403 ]]
}

# server_pid: the recorded pid if it is alive and is a weed on this data dir
# (a recycled pid is never ours).
server_pid() {
  local pid cmdline
  [[ -s "$PID_FILE" ]] || return 0
  pid=$(<"$PID_FILE")
  pid_alive "$pid" || return 0
  cmdline=$({ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null) || return 0
  if [[ "$cmdline" == *weed*" -dir=$DATA_DIR "* ]]; then echo "$pid"; fi
}

pid=$(server_pid)
if [[ -n "$pid" ]]; then
  exe=$(readlink "/proc/$pid/exe")
  if [[ "${exe% (deleted)}" != "$WEED" || "$exe" == *" (deleted)" ]]; then
    log "weed (pid $pid) runs $exe, not $WEED: restarting it"
    stop_pid "$pid" weed 20; pid=""
  elif ((config_changed)); then
    log "identities changed: restarting weed (pid $pid)"
    stop_pid "$pid" weed 20; pid=""
  fi
fi

if [[ -n "$pid" ]] && s3_refuses; then
  log "weed is running (pid $pid, http://$ENDPOINT)"
else
  if [[ -n "$pid" ]]; then
    log "weed (pid $pid) does not answer on $ENDPOINT; restarting it"
    stop_pid "$pid" weed 20
  elif curl -s -o /dev/null -m 2 "http://$ENDPOINT/"; then
    die "something answers on $ENDPOINT but $PID_FILE names no weed of $DATA_DIR; stop it first (.ci/teardown-s3.sh)"
  fi
  # -ip and -ip.bind: every listener on loopback (the default is the
  # machine's address, and 0.0.0.0 for some). No Iceberg, Lance, WebDAV,
  # IAM or metrics listeners. -volume.max=0 sizes the volume count to the
  # disk's free space: each bucket is a collection with volumes of its own,
  # and the tests make many buckets. -master.volumeSizeLimitMB=256 keeps
  # each volume small. Unix sockets under RUN_DIR, not /tmp.
  args=(
    server -ip="$IP" -ip.bind="$IP" -dir="$DATA_DIR"
    -master.port="$MASTER_PORT" -master.volumeSizeLimitMB=256
    -volume.port="$VOLUME_PORT" -volume.max=0 -volume.preStopSeconds=0
    -filer -filer.port="$FILER_PORT" -filer.localSocket="$RUN_DIR/filer.sock"
    -s3 -s3.port="$S3_PORT" -s3.config="$IDENTITIES" -s3.localSocket="$RUN_DIR/s3.sock"
    -s3.port.iceberg=0 -s3.port.lance=0
  )
  mkdir -p "$(dirname "$LOG_FILE")"
  echo "=== $(date -u +%FT%TZ) setup-s3: starting $WEED ${args[*]}" >>"$LOG_FILE"
  setsid nohup "$WEED" "${args[@]}" >>"$LOG_FILE" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PID_FILE"
  rc=0
  wait_for "started weed (SeaweedFS ${SEAWEEDFS_COMMIT}, pid $pid); log: $LOG_FILE" "$START_SECONDS" "pid_alive $pid" s3_refuses || rc=$?
  if ((rc)); then
    tail -n 30 "$LOG_FILE" >&2
    ((rc == 1)) || die "weed exited at start (log above, all of it in $LOG_FILE)"
    die "weed (pid $pid) did not answer on $ENDPOINT within ${START_SECONDS}s (log: $LOG_FILE)"
  fi
fi

# --- 4. prove it --------------------------------------------------------------------
step check
# A signed ListBuckets (curl's SigV4): the identities are the ones written.
# The filer may still be joining the master when the gateway first answers.
signed_list() {
  curl -sf -m 5 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$ACCESS_KEY:$SECRET_KEY" \
    "http://$ENDPOINT/" | grep -q ListAllMyBucketsResult
}
wait_for "a signed request is served" 30 "pid_alive $pid" signed_list ||
  die "weed refuses the keys of $ENV_FILE, or does not list buckets (log: $LOG_FILE)"
step done
log "steps: ${CI_STEPS[*]}"
log "done: source $ENV_FILE (SHELLBOX_S3_ENDPOINT=$ENDPOINT)"
