# Sourced by every .ci/ script: the helpers they share. The caller sets
# CI_NAME (the prefix of its log lines) before sourcing it.
#
#   log MSG, die MSG     a line on stdout, or "error: MSG" on stderr and exit 1;
#                        with CI_LOG_ELAPSED=1 each line shows the seconds
#                        since the script started
#   step NAME            ends the step running (logging its time), starts NAME
#   wait_for             polls a command until it succeeds
#   write_file           replaces a file only when its content changes
#   apt_install          installs the Debian packages that are missing
#   purge_flag           a teardown script's arguments
#   pid_alive, stop_pid  a process by pid: alive (not a zombie), stopped
#   quiet_ctr            ctr without its cgroup v1 warning
#   mounts_under         the mount points under some directories, deepest first
#   build_cached         a binary cache dir, built once under a lock of its own

CI_NAME=${CI_NAME:-ci}
CI_T0=${EPOCHREALTIME/./}

# elapsed T0: seconds since T0 (microseconds, as ${EPOCHREALTIME/./}), one decimal.
elapsed() {
  local now=${EPOCHREALTIME/./}
  printf '%d.%01d' $(((now - $1) / 1000000)) $((((now - $1) / 100000) % 10))
}

log() {
  if [[ "${CI_LOG_ELAPSED:-0}" == 1 ]]; then
    echo "$CI_NAME: [$(elapsed "$CI_T0")s] $*"
  else
    echo "$CI_NAME: $*"
  fi
}
die() { echo "$CI_NAME: error: $*" >&2; exit 1; }

CI_STEPS=()
CI_STEP_NAME=""
CI_STEP_T0=$CI_T0
# step NAME: ends the step running (logging its time, kept in CI_STEPS for a
# summary) and starts NAME; `step done` ends the last one.
step() {
  if [[ -n "$CI_STEP_NAME" ]]; then
    CI_STEPS+=("$CI_STEP_NAME $(elapsed "$CI_STEP_T0")s")
    log "step $CI_STEP_NAME: $(elapsed "$CI_STEP_T0")s"
  fi
  CI_STEP_NAME=$1
  CI_STEP_T0=${EPOCHREALTIME/./}
}

# wait_for DESC SECONDS ALIVE CMD...: polls CMD (output discarded) every
# 0.2 s until it succeeds, then logs DESC with the time it took. Returns 1
# when SECONDS have passed, and 2 as soon as ALIVE fails: a command (split
# into words) saying whether what CMD waits for can still come, "" for none.
wait_for() {
  local desc=$1 timeout=$2 alive=$3 t0=${EPOCHREALTIME/./} end
  shift 3
  end=$((SECONDS + timeout))
  until "$@" >/dev/null 2>&1; do
    # shellcheck disable=SC2086
    if [[ -n "$alive" ]] && ! $alive; then return 2; fi
    if ((SECONDS >= end)); then return 1; fi
    sleep 0.2
  done
  log "$desc (after $(elapsed "$t0")s)"
}

# write_file MODE PATH < content: replaces PATH (mode MODE) only when the
# content differs, so a daemon watching the file, or restarted when a file
# it names changes, is left alone. Sets FILE_CHANGED to 1 or 0.
write_file() {
  local mode=$1 path=$2 tmp
  tmp=$(mktemp "$path.XXXXXX")
  cat >"$tmp"
  if cmp -s "$tmp" "$path"; then
    rm -f "$tmp"
    FILE_CHANGED=0
    return 0
  fi
  chmod "$mode" "$tmp"
  mv -f "$tmp" "$path"
  FILE_CHANGED=1
}

# apt_install PKG...: installs those of the Debian packages PKG that are
# not installed (one apt-get update, only when one is missing).
apt_install() {
  local need=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || need+=("$p"); done
  ((${#need[@]})) || return 0
  log "apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq || die "apt-get update failed"
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || die "apt-get install ${need[*]} failed"
}

# purge_flag ARGS...: a teardown script's arguments: PURGE=1 for --purge;
# --help prints the script's header comment.
purge_flag() {
  local arg
  PURGE=0
  for arg in "$@"; do
    case "$arg" in
      --purge) PURGE=1 ;;
      -h | --help) sed -n '2,/^set -/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
      *) die "unknown argument: $arg (usage: ${0##*/} [--purge])" ;;
    esac
  done
}

# pid_alive PID: PID is a live process (a zombie, which a script's own
# detached child is until the script ends, is not).
pid_alive() {
  [[ "$1" =~ ^[0-9]+$ && -d /proc/$1 ]] || return 1
  [[ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]]
}

# stop_pid PID NAME [SECONDS]: SIGTERM, then SIGKILL after SECONDS
# (default 20) if PID is still alive.
stop_pid() {
  local pid=$1 name=$2 t=${3:-20} i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < t * 10; i++)); do
    pid_alive "$pid" || return 0
    sleep 0.1
  done
  log "$name (pid $pid) did not exit in ${t}s: SIGKILL"
  kill -KILL "$pid" 2>/dev/null || true
  sleep 0.2
}

# quiet_ctr CTR ARGS...: runs ctr without the warning every ctr command
# prints on a cgroup v1 host ("DEPRECATION: The support for cgroup v1").
quiet_ctr() {
  "$@" 2> >(grep -v 'support for cgroup v1 is deprecated' >&2)
}

# mounts_under DIR...: the mount points at or below any DIR, deepest first
# (mountinfo escapes spaces as \040).
mounts_under() {
  awk -v dirs="$*" '
    BEGIN { n = split(dirs, d, " ") }
    { p = $5; gsub(/\\040/, " ", p)
      for (i = 1; i <= n; i++) if (p == d[i] || index(p, d[i] "/") == 1) { print p; break } }' \
    /proc/self/mountinfo | sort -r
}

# build_cached LABEL DIR OK BUILD: the binaries of DIR (under
# $SHELLBOX_CI_CACHE), unless `OK DIR` says they are there and run (or
# SHELLBOX_CI_REBUILD=1): `BUILD TMP` writes them into TMP/bin (TMP/src is
# its scratch module) with a .complete stamp, `OK TMP/bin` checks them, and
# they are renamed to DIR, so an interrupted build leaves no half cache. One
# build of DIR at a time on this machine (a lock per DIR: two builds of
# different binaries, setup-kube.sh's in the background and
# setup-docker.sh's, overlap).
build_cached() {
  local label=$1 dir=$2
  mkdir -p "$SHELLBOX_CI_CACHE"
  (
    flock -w 1800 9 || die "another build holds $dir.lock for 30 min"
    _build_cached "$@"
  ) 9>>"$dir.lock"
}

_build_cached() {
  local label=$1 dir=$2 ok=$3 build=$4 t0=$SECONDS tmp
  if [[ "${SHELLBOX_CI_REBUILD:-0}" != 1 ]] && "$ok" "$dir"; then
    log "$label: cached in $dir"
    return 0
  fi
  log "building $label from the module proxy"
  tmp=$(mktemp -d "$SHELLBOX_CI_CACHE/.build-${dir##*/}.XXXXXX")
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" EXIT
  mkdir "$tmp/src" "$tmp/bin"
  "$build" "$tmp" || die "building $label failed (output above)"
  "$ok" "$tmp/bin" || die "the $label binaries just built do not run or do not say their version"
  rm -rf "$dir"
  mv "$tmp/bin" "$dir"
  log "$label built in $((SECONDS - t0))s: $dir"
}

# build_in_module DIR LDFLAGS OUTDIR PKG...: builds the main packages PKG in
# the module at DIR (go.mod already requires their module) into OUTDIR,
# with BUILD_GCFLAGS as -gcflags when set.
# The packages are blank-imported from a file the build never compiles, so
# `go mod tidy` records every dependency they need.
build_in_module() {
  local dir=$1 ldflags=$2 out=$3
  shift 3
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "$@"
    printf ')\n'
  } >"$dir/tools.go"
  (
    cd "$dir"
    export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
    go mod tidy
    go build -trimpath ${BUILD_GCFLAGS:+"-gcflags=$BUILD_GCFLAGS"} -ldflags "$ldflags" -o "$out/" "$@"
  )
}

# go_get_module TMP MODULE VERSION: a scratch module in TMP/src requiring
# MODULE@VERSION.
go_get_module() {
  (cd "$1/src" && go mod init shellbox-ci/build >/dev/null 2>&1 && GOFLAGS=-mod=mod go get "$2@$3") ||
    die "cannot fetch $2@$3 from the module proxy"
}

# The sandbox check of setup-docker.sh and setup-containerd.sh: a container
# prints "ok", its kernel, and whether ls -l and stat work (they fail with
# EINVAL under an old gVisor).
CHECK_SCRIPT='echo ok; cat /proc/version; ls -l /usr/bin/bash /workspace >/dev/null && stat / >/dev/null && echo ls-stat-ok'

# check_gvisor OUT: dies unless OUT, CHECK_SCRIPT's output, comes from a
# gVisor kernel (not the host's) where ls -l and stat work; logs its kernel.
check_gvisor() {
  local out=$1 guest
  guest=$(sed -n 2p <<<"$out")
  [[ "$out" == ok* ]] || die "unexpected runsc output: $out"
  [[ "$guest" != "$(cat /proc/version)" ]] || die "the runsc container reports the host kernel; it is not running under gVisor"
  grep -qx ls-stat-ok <<<"$out" || die "ls -l or stat fails under runsc: $out"
  log "runsc container runs; its kernel: $guest"
}
