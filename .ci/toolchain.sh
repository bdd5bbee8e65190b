# Sourced (after lib.sh) by setup-docker.sh, setup-containerd.sh and
# setup-kube.sh: the versions of the container runtimes shellbox's CI builds
# from the Go module proxy, where the built binaries are cached, and the
# functions that build them.
#
# Binaries are cached outside the clone, keyed by version, so a second CI run
# on the same machine (or a developer's rerun) builds nothing:
#   $SHELLBOX_CI_CACHE/containerd-<version>/  containerd, containerd-shim-runc-v2, ctr
#   $SHELLBOX_CI_CACHE/gvisor-<version>/      runsc, containerd-shim-runsc-v1
# A cache dir is complete when it holds a .complete stamp; it is built in a
# temporary dir and renamed, so an interrupted build leaves no half cache
# (lib.sh's build_cached).
#
# The caller runs as root.
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
  build_cached "containerd $CONTAINERD_VERSION" "$CONTAINERD_DIR" containerd_ok _build_containerd
}
_build_containerd() {
  go_get_module "$1" "$CONTAINERD_MODULE" "$CONTAINERD_VERSION"
  build_in_module "$1/src" \
    "-s -w -X $CONTAINERD_MODULE/version.Version=$CONTAINERD_VERSION -X $CONTAINERD_MODULE/version.Package=$CONTAINERD_MODULE" \
    "$1/bin" \
    "$CONTAINERD_MODULE/cmd/containerd" "$CONTAINERD_MODULE/cmd/containerd-shim-runc-v2" "$CONTAINERD_MODULE/cmd/ctr" || return 1
  touch "$1/bin/.complete"
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
  build_cached "gVisor $GVISOR_VERSION (runsc, containerd-shim-runsc-v1)" "$GVISOR_DIR" gvisor_ok _build_gvisor
}
_build_gvisor() {
  local tmp=$1 moddir manager service
  moddir=$(cd "$tmp" && GOFLAGS=-mod=mod go mod download -json "$GVISOR_MODULE@$GVISOR_VERSION" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [[ -n "$moddir" && -d "$moddir" ]] || die "cannot fetch $GVISOR_MODULE@$GVISOR_VERSION from the module proxy"
  # The module cache is read-only: patch a copy, used through a replace.
  cp -a "$moddir" "$tmp/gvisor" && chmod -R u+w "$tmp/gvisor" || return 1
  manager="$tmp/gvisor/pkg/shim/v1/manager.go"
  perl -0pi -e 's{return shim\.BootstrapParams\{\}, fmt\.Errorf\("failed to set OOM Score on shim: %w", err\)}{_ = err // '"$GVISOR_PATCH_MARK"'}' "$manager"
  grep -qF "$GVISOR_PATCH_MARK" "$manager" || die "the gVisor shim patch did not apply to $manager (has the source changed?)"
  service="$tmp/gvisor/pkg/shim/v1/runsc/service.go"
  perl -0pi -e 's{p\.Sandbox = specutils\.SpecContainerType\(spec\) == specutils\.ContainerTypeSandbox}{p.Sandbox = specutils.SpecContainerType(spec) != specutils.ContainerTypeContainer // '"$GVISOR_PATCH2_MARK"'}' "$service"
  grep -qF "$GVISOR_PATCH2_MARK" "$service" || die "the gVisor shim patch did not apply to $service (has the source changed?)"
  (cd "$tmp/src" && go mod init shellbox-ci/gvisor >/dev/null 2>&1 &&
    go mod edit -require="$GVISOR_MODULE@$GVISOR_VERSION" -replace="$GVISOR_MODULE=../gvisor") ||
    die "cannot write the gVisor build module"
  build_in_module "$tmp/src" "-s -w -X $GVISOR_MODULE/runsc/version.version=$GVISOR_VERSION" "$tmp/bin" \
    "$GVISOR_MODULE/runsc" "$GVISOR_MODULE/shim" || return 1
  mv "$tmp/bin/shim" "$tmp/bin/containerd-shim-runsc-v1" && echo "$GVISOR_PATCHES" >"$tmp/bin/.complete"
}
