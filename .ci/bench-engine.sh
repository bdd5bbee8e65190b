#!/usr/bin/env bash
# bench-engine.sh start|stop|status — a second, isolated Docker engine on
# kernel overlay2 storage, for benchmarks.
#
# Why: this machine's engine stores images with fuse-overlayfs, where every
# process start inside a container pays FUSE round trips for its path lookups
# and library opens (bash -c true: ~1.5 ms on the host, ~5-7 ms in a container
# on fuse-overlayfs, ~1.7 ms on overlay2). That is a property of the engine's
# storage driver, not of shellbox; production engines use overlay2. This
# script starts a second dockerd beside the first so both can be measured on
# one machine in one session, without touching the first engine's config,
# containers or network:
#
#   bash .ci/bench-engine.sh start
#   DOCKER_HOST=unix:///run/shellbox-bench/docker.sock \
#     go test ./executor/sandboxed/ -run '^$' -bench 'WarmCall|ColdSession' -benchtime 200x
#   bash .ci/bench-engine.sh stop
#
# It uses its own data root, exec root, socket, containerd namespace and bridge
# (sbxbench0; "bridge": "none" would make dockerd delete the first engine's
# docker0), no iptables rules, and the runsc runtime as .ci/setup-docker.sh
# registers it. It is not part of CI.
set -euo pipefail

BASE=/run/shellbox-bench
SOCK=$BASE/docker.sock
DATA=${SHELLBOX_BENCH_DATA:-/var/lib/shellbox-bench/docker}
BRIDGE=sbxbench0
BRIDGE_CIDR=10.213.213.1/24
RUNSC_ARGS=${SHELLBOX_RUNSC_ARGS:-'["--network=none","--host-uds=create","--oci-seccomp"]'}

CI_NAME=bench-engine
# shellcheck source=lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

engine() { DOCKER_HOST=unix://$SOCK docker "$@"; }

start() {
	[[ $(id -u) == 0 ]] || die "must run as root (it starts dockerd)"
	if engine info >/dev/null 2>&1; then
		log "already running at $SOCK"
		return
	fi
	grep -qw overlay /proc/filesystems || modprobe overlay 2>/dev/null || die "the kernel has no overlay filesystem"
	mkdir -p "$BASE" "$DATA"
	if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
		ip link add "$BRIDGE" type bridge
		ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
		ip link set "$BRIDGE" up
	fi
	local runsc
	runsc=$(command -v runsc || true)
	local runtimes='{}'
	if [[ -n $runsc ]]; then
		runtimes="{\"runsc\":{\"path\":\"$runsc\",\"runtimeArgs\":$RUNSC_ARGS}}"
	fi
	cat >"$BASE/daemon.json" <<EOF
{
  "data-root": "$DATA",
  "exec-root": "$BASE/exec",
  "pidfile": "$BASE/docker.pid",
  "hosts": ["unix://$SOCK"],
  "storage-driver": "overlay2",
  "bridge": "$BRIDGE",
  "iptables": false,
  "ip-masq": false,
  "runtimes": $runtimes
}
EOF
	log "starting dockerd (overlay2) at $SOCK; log $BASE/dockerd.log"
	nohup dockerd --config-file "$BASE/daemon.json" \
		--containerd-namespace shellbox-bench --containerd-plugins-namespace shellbox-bench-plugins \
		>"$BASE/dockerd.log" 2>&1 &
	for _ in $(seq 60); do
		engine info >/dev/null 2>&1 && break
		sleep 0.5
	done
	engine info >/dev/null 2>&1 || { tail -20 "$BASE/dockerd.log" >&2; die "dockerd did not come up"; }
	log "storage driver: $(engine info --format '{{.Driver}}')"
	# The benchmarks build their test image themselves; copy what the first
	# engine has so the sandbox image needs no rebuild.
	for img in shellbox-test:latest shellbox-sandbox:bookworm; do
		if docker image inspect "$img" >/dev/null 2>&1 && ! engine image inspect "$img" >/dev/null 2>&1; then
			log "copying $img"
			docker save "$img" | engine load -q >/dev/null
		fi
	done
	log "ready: export DOCKER_HOST=unix://$SOCK"
}

stop() {
	if [[ -f $BASE/docker.pid ]]; then
		local pid
		pid=$(cat "$BASE/docker.pid")
		ids=$(engine ps -aq 2>/dev/null || true)
		[[ -z $ids ]] || engine rm -f $ids >/dev/null 2>&1 || true
		stop_pid "$pid" dockerd 20
		log "stopped dockerd $pid"
	fi
	ip link del "$BRIDGE" 2>/dev/null || true
}

case ${1:-} in
start) start ;;
stop) stop ;;
status) engine info --format '{{.Driver}} {{.ServerVersion}}' ;;
*) die "usage: $0 start|stop|status" ;;
esac
