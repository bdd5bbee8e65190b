# Sourced by setup-docker.sh and setup-containerd.sh: the versions of the
# container runtimes shellbox's CI builds from the Go module proxy, where the
# built binaries are cached, and the functions that build them.
#
# Binaries are cached outside the clone, keyed by version, so a second CI run
# on the same machine (or a developer's rerun) builds nothing:
#   $SHELLBOX_CI_CACHE/containerd-<version>/  containerd, containerd-shim-runc-v2, ctr
#   $SHELLBOX_CI_CACHE/gvisor-<version>/      runsc, containerd-shim-runsc-v1
# A cache dir is complete when it holds a .complete stamp; it is built in a
# temporary dir and renamed, so an interrupted build leaves no half cache.
#
# The caller defines log and die, and runs as root.
#
# Environment:
#   SHELLBOX_CI_CACHE   cache root (default /var/cache/shellbox-ci)
#   SHELLBOX_CI_REBUILD=1  build even when the cache looks complete

CONTAINERD_VERSION=v2.4.2
CONTAINERD_MODULE=github.com/containerd/containerd/v2
# gVisor publishes only untagged snapshots of its "go" branch to the module
# proxy; this one is served (several newer ones answer 403).
GVISOR_VERSION=v0.0.0-20260701204157-69c2d17aea96
GVISOR_MODULE=gvisor.dev/gvisor

SHELLBOX_CI_CACHE=${SHELLBOX_CI_CACHE:-/var/cache/shellbox-ci}
CONTAINERD_DIR=$SHELLBOX_CI_CACHE/containerd-$CONTAINERD_VERSION
GVISOR_DIR=$SHELLBOX_CI_CACHE/gvisor-$GVISOR_VERSION

export PATH="/usr/local/go/bin:$PATH"

# ci_cache_lock: one build at a time on this machine (fd 8, held until exit).
ci_cache_lock() {
  mkdir -p "$SHELLBOX_CI_CACHE"
  exec 8>>"$SHELLBOX_CI_CACHE/.build.lock"
  if ! flock -w 900 8; then die "another build holds $SHELLBOX_CI_CACHE/.build.lock for 15 min"; fi
}

# build_in_module DIR LDFLAGS OUTDIR PKG...: builds the main packages PKG in the
# module at DIR (go.mod already requires their module) into OUTDIR.
# The packages are blank-imported from a file the build never compiles, so
# `go mod tidy` records every dependency they need.
build_in_module() {
  local dir=$1 ldflags=$2 out=$3; shift 3
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    printf '\t_ "%s"\n' "$@"
    printf ')\n'
  } >"$dir/tools.go"
  (
    cd "$dir"
    export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
    go mod tidy
    go build -trimpath -ldflags "$ldflags" -o "$out/" "$@"
  )
}

# containerd_ok DIR: the three containerd binaries in DIR run and say v2.4.2.
containerd_ok() {
  local d=$1
  [[ -e "$d/.complete" ]] || return 1
  grep -qF " $CONTAINERD_VERSION " <<<"$("$d/containerd" --version 2>/dev/null) " || return 1
  "$d/ctr" --version >/dev/null 2>&1 || return 1
  "$d/containerd-shim-runc-v2" -v >/dev/null 2>&1 || return 1
}

# build_containerd: containerd, its runc shim and ctr at $CONTAINERD_VERSION
# into $CONTAINERD_DIR, unless they are there and run.
build_containerd() {
  if [[ "${SHELLBOX_CI_REBUILD:-0}" != 1 ]] && containerd_ok "$CONTAINERD_DIR"; then
    log "containerd $CONTAINERD_VERSION: cached in $CONTAINERD_DIR"
    return 0
  fi
  log "building containerd $CONTAINERD_VERSION (containerd, containerd-shim-runc-v2, ctr) from the module proxy"
  local t0=$SECONDS tmp
  tmp=$(mktemp -d "$SHELLBOX_CI_CACHE/.build-containerd.XXXXXX")
  mkdir "$tmp/src" "$tmp/bin"
  (cd "$tmp/src" && go mod init shellbox-ci/containerd >/dev/null 2>&1 &&
    GOFLAGS=-mod=mod go get "$CONTAINERD_MODULE@$CONTAINERD_VERSION") ||
    { rm -rf "$tmp"; die "cannot fetch $CONTAINERD_MODULE@$CONTAINERD_VERSION from the module proxy"; }
  build_in_module "$tmp/src" \
    "-s -w -X $CONTAINERD_MODULE/version.Version=$CONTAINERD_VERSION -X $CONTAINERD_MODULE/version.Package=$CONTAINERD_MODULE" \
    "$tmp/bin" \
    "$CONTAINERD_MODULE/cmd/containerd" "$CONTAINERD_MODULE/cmd/containerd-shim-runc-v2" "$CONTAINERD_MODULE/cmd/ctr" ||
    { rm -rf "$tmp"; die "building containerd $CONTAINERD_VERSION failed (output above)"; }
  touch "$tmp/bin/.complete"
  containerd_ok "$tmp/bin" || { rm -rf "$tmp"; die "the containerd binaries just built do not run or do not say $CONTAINERD_VERSION"; }
  rm -rf "$CONTAINERD_DIR"
  mv "$tmp/bin" "$CONTAINERD_DIR"
  rm -rf "$tmp"
  log "containerd $CONTAINERD_VERSION built in $((SECONDS - t0))s: $CONTAINERD_DIR"
}

# Two one-line patches to gVisor's containerd shim (pkg/shim/v1):
#
# 1. manager.go: the shim sets its own oom_score_adj to -999 and fails the
#    container if it cannot. Root on this kind of machine lacks
#    CAP_SYS_RESOURCE (bit 24 of CapEff is clear), so every runsc task failed:
#      failed to set OOM Score on shim: write /proc/N/oom_score_adj: permission denied
#    The error is dropped without a word: the shim's `start` prints a JSON
#    reply containerd parses, and a log line there breaks it ("unsupported
#    protocol").
# 2. runsc/service.go: the shim hands the container's stdio to `runsc create`
#    only for a CRI "sandbox" container (annotation
#    io.kubernetes.cri.container-type=sandbox). Any other client's container
#    (ctr, shellbox: no annotation) was created with runsc's output on a pipe
#    the shim reads to EOF, the sandbox process inherited that pipe, and the
#    shim hung in Create for good: the task stayed "created", every later call
#    on the shim timed out ("converting task to protobuf: context deadline
#    exceeded"). A container without the annotation is now its own sandbox,
#    as runsc itself (specutils.IsRootContainer) and the shim's
#    utils.IsSandbox already treat it.
GVISOR_PATCH_MARK='shellbox-ci: no CAP_SYS_RESOURCE here; keep the inherited OOM score'
GVISOR_PATCH2_MARK='shellbox-ci: no CRI annotation = its own sandbox'
GVISOR_PATCHES="$GVISOR_PATCH_MARK; $GVISOR_PATCH2_MARK"

gvisor_ok() {
  local d=$1
  [[ -e "$d/.complete" && "$(<"$d/.complete")" == "$GVISOR_PATCHES" ]] || return 1
  grep -qF "$GVISOR_VERSION" <<<"$("$d/runsc" --version 2>/dev/null)" || return 1
  "$d/containerd-shim-runsc-v1" -v >/dev/null 2>&1 || return 1
}

# build_gvisor: runsc and containerd-shim-runsc-v1 at $GVISOR_VERSION, with the
# shim patched, into $GVISOR_DIR, unless they are there and run.
build_gvisor() {
  if [[ "${SHELLBOX_CI_REBUILD:-0}" != 1 ]] && gvisor_ok "$GVISOR_DIR"; then
    log "gVisor $GVISOR_VERSION: cached in $GVISOR_DIR"
    return 0
  fi
  log "building gVisor runsc and containerd-shim-runsc-v1 $GVISOR_VERSION from the module proxy (about 1.5 min)"
  local t0=$SECONDS tmp moddir manager service
  tmp=$(mktemp -d "$SHELLBOX_CI_CACHE/.build-gvisor.XXXXXX")
  mkdir "$tmp/src" "$tmp/bin"
  moddir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$GVISOR_MODULE@$GVISOR_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -n "$moddir" && -d "$moddir" ]] || { rm -rf "$tmp"; die "cannot fetch $GVISOR_MODULE@$GVISOR_VERSION from the module proxy"; }
  # The module cache is read-only: patch a copy, used through a replace.
  cp -a "$moddir" "$tmp/gvisor"
  chmod -R u+w "$tmp/gvisor"
  manager="$tmp/gvisor/pkg/shim/v1/manager.go"
  perl -0pi -e 's{return shim\.BootstrapParams\{\}, fmt\.Errorf\("failed to set OOM Score on shim: %w", err\)}{_ = err // '"$GVISOR_PATCH_MARK"'}' "$manager"
  grep -qF "$GVISOR_PATCH_MARK" "$manager" ||
    { rm -rf "$tmp"; die "the gVisor shim patch did not apply to $manager (has the source changed?)"; }
  service="$tmp/gvisor/pkg/shim/v1/runsc/service.go"
  perl -0pi -e 's{p\.Sandbox = specutils\.SpecContainerType\(spec\) == specutils\.ContainerTypeSandbox}{p.Sandbox = specutils.SpecContainerType(spec) != specutils.ContainerTypeContainer // '"$GVISOR_PATCH2_MARK"'}' "$service"
  grep -qF "$GVISOR_PATCH2_MARK" "$service" ||
    { rm -rf "$tmp"; die "the gVisor shim patch did not apply to $service (has the source changed?)"; }
  (cd "$tmp/src" && go mod init shellbox-ci/gvisor >/dev/null 2>&1 &&
    go mod edit -require="$GVISOR_MODULE@$GVISOR_VERSION" -replace="$GVISOR_MODULE=../gvisor") ||
    { rm -rf "$tmp"; die "cannot write the gVisor build module"; }
  build_in_module "$tmp/src" "-s -w -X $GVISOR_MODULE/runsc/version.version=$GVISOR_VERSION" "$tmp/bin" \
    "$GVISOR_MODULE/runsc" "$GVISOR_MODULE/shim" ||
    { rm -rf "$tmp"; die "building gVisor $GVISOR_VERSION failed (output above)"; }
  mv "$tmp/bin/shim" "$tmp/bin/containerd-shim-runsc-v1"
  echo "$GVISOR_PATCHES" >"$tmp/bin/.complete"
  gvisor_ok "$tmp/bin" || { rm -rf "$tmp"; die "the gVisor binaries just built do not run or do not say $GVISOR_VERSION"; }
  rm -rf "$GVISOR_DIR"
  mv "$tmp/bin" "$GVISOR_DIR"
  rm -rf "$tmp"
  log "gVisor $GVISOR_VERSION built in $((SECONDS - t0))s: $GVISOR_DIR"
}
