#!/usr/bin/env bash
# Stops the cluster .ci/setup-kube.sh started and undoes what it did to the
# machine; safe to run twice, or when only part of the cluster runs:
#
#   1. stops the kubelet, then kills and deletes every container of the
#      cluster's containerd (namespace k8s.io) so no shim keeps a pod alive;
#   2. stops kube-router, kube-proxy, the control plane and containerd
#      (SIGTERM, SIGKILL after 20 s), then kills by pid what is left of
#      theirs: shims of the cluster's containerd socket, processes in the
#      kubelet's kubepods cgroups;
#   3. unmounts everything under /var/lib/shellbox-kube and /run/shellbox-kube
#      (pod volumes, rootfs, network namespaces), deletes the CNI bridge, the
#      CNI-* and KUBE-* iptables chains and the ipsets of kube-proxy and
#      kube-router, the kubepods cgroups;
#   4. restores the sysctls the kubelet changed and removes the fixed paths
#      it created (/var/lib/kubelet, /var/log/containers, ...) unless they
#      existed before the first setup;
#   5. deletes the cluster's data (/var/lib/shellbox-kube: etcd, images,
#      containerd's root) and state (/run/shellbox-kube), so the next setup
#      starts a fresh cluster.
#
# The PKI and configuration (/etc/shellbox-kube) and the build cache
# (/var/cache/shellbox-ci) are kept; --purge deletes /etc/shellbox-kube and
# the logs (/var/log/shellbox-kube) too. Docker, its containerd and
# setup-containerd.sh's containerd are never touched: only pids recorded by
# setup-kube.sh, shims naming the cluster's own socket and processes in the
# cluster's cgroups are signalled.
#
# Usage: teardown-kube.sh [--purge]
set -uo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CI_NAME=teardown-kube
CI_LOG_ELAPSED=1
# shellcheck source=lib.sh
source "$HERE/lib.sh"

purge_flag "$@"
[[ $(id -u) == 0 ]] || die "must run as root"

# shellcheck source=toolchain.sh
source "$HERE/toolchain.sh"
# shellcheck source=kube-env.sh
source "$HERE/kube-env.sh"

# --- 1. the kubelet, then the pods' containers ---------------------------------------
stop_daemon kubelet
if [[ -n "$(daemon_pid containerd)" ]]; then
  n=0
  for task in $(ctr_ tasks ls -q 2>/dev/null); do
    timeout 10 "$CONTAINERD_DIR/ctr" --address "$CTRD_SOCK" -n k8s.io tasks kill -a -s SIGKILL "$task" >/dev/null 2>&1
    timeout 20 "$CONTAINERD_DIR/ctr" --address "$CTRD_SOCK" -n k8s.io tasks delete -f "$task" >/dev/null 2>&1
    n=$((n + 1))
  done
  ((n == 0)) || log "killed $n container task(s)"
fi

# --- 2. the daemons, then what is left of theirs -------------------------------------
for d in kube-router kube-proxy kube-scheduler kube-controller-manager kube-apiserver etcd containerd; do
  stop_daemon "$d"
done
ours=""
for f in /sys/fs/cgroup/*/kubepods; do
  [[ -d "$f" ]] && ours+=" $(find "$f" -name cgroup.procs -exec cat {} + 2>/dev/null | tr '\n' ' ')"
done
for p in /proc/[0-9]*; do
  cmdline=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
  case "$cmdline" in *containerd-shim*"-address $CTRD_SOCK "*) ours+=" ${p#/proc/}" ;; esac
done
ours=$(tr ' ' '\n' <<<"$ours" | grep -x '[0-9]\+' | sort -un | tr '\n' ' ')
if [[ -n "${ours// /}" ]]; then
  log "killing what is left of the cluster: $ours"
  # shellcheck disable=SC2086
  kill -KILL $ours 2>/dev/null
  sleep 0.5
fi

# --- 3. mounts, network, cgroups ---------------------------------------------------------
mapfile -t mounts < <(mounts_under "$VAR" "$RUN")
for m in "${mounts[@]}"; do
  umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
done
((${#mounts[@]} == 0)) || log "unmounted ${#mounts[@]} mount(s)"
if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE" && log "deleted bridge $BRIDGE"; fi
# CNI-* (portmap, firewall, bridge's masquerade) and KUBE-* (kube-proxy,
# kube-router) chains: first the jumps to them from other chains, then the
# chains. Docker's chains are DOCKER*: never matched.
for ipt in iptables ip6tables; do
  command -v "$ipt" >/dev/null || continue
  for table in filter nat mangle raw; do
    rules=$($ipt -t "$table" -S 2>/dev/null) || continue
    grep -E '^-A ' <<<"$rules" | grep -vE '^-A (CNI|KUBE)-' | grep -E -- '-j (CNI|KUBE)-' |
      while read -r line; do
        # shellcheck disable=SC2086
        eval "$ipt -t $table ${line/-A /-D }" 2>/dev/null
      done
    chains=$(awk '$1 == "-N" && $2 ~ /^(CNI|KUBE)-/ {print $2}' <<<"$rules")
    for c in $chains; do $ipt -t "$table" -F "$c" 2>/dev/null; done
    for c in $chains; do $ipt -t "$table" -X "$c" 2>/dev/null; done
  done
done
command -v nft >/dev/null && for fam in ip ip6; do nft delete table "$fam" kube-proxy 2>/dev/null; done
if command -v ipset >/dev/null; then
  for set in $(ipset list -n 2>/dev/null | grep -E '^(KUBE-|kube-router)'); do ipset destroy "$set" 2>/dev/null; done
fi
for f in /sys/fs/cgroup/*/kubepods; do
  [[ -d "$f" ]] && find "$f" -depth -type d -exec rmdir {} \; 2>/dev/null
done
left=$(iptables-save 2>/dev/null | grep -cE '^:(CNI|KUBE)-')
log "network and cgroups cleaned (CNI/KUBE chains left: $left, kubepods cgroups left: $(ls -d /sys/fs/cgroup/*/kubepods 2>/dev/null | wc -l))"

# --- 4. sysctls and the kubelet's fixed paths ----------------------------------------------
if [[ -s "$VAR/sysctl.orig" ]]; then
  while IFS= read -r kv; do sysctl -qw "$kv" >/dev/null 2>&1; done <"$VAR/sysctl.orig"
  log "restored sysctls: $(tr '\n' ' ' <"$VAR/sysctl.orig")"
fi
if [[ -e "$VAR/preexisting" ]]; then
  for d in $SYSTEM_DIRS; do
    [[ -e "$d" ]] || continue
    grep -qxF "$d" "$VAR/preexisting" && continue
    if awk -v d="$d" 'index($5, d) == 1 {found = 1} END {exit !found}' /proc/self/mountinfo; then
      log "$d still has mounts: left in place"
      continue
    fi
    rm -rf "$d" && log "removed $d (made by the kubelet)"
  done
fi
# Links the kubelet made in a /var/log/containers that was there before.
[[ -d /var/log/containers ]] && find /var/log/containers -maxdepth 1 -type l -lname "$VAR/*" -delete 2>/dev/null
rm -f /var/lib/cni/results/"$CNI_NET"-* 2>/dev/null

# --- 5. data ------------------------------------------------------------------------------
if [[ -n "$(awk -v a="$VAR" -v b="$RUN" 'index($5, a) == 1 || index($5, b) == 1' /proc/self/mountinfo)" ]]; then
  die "mounts remain under $VAR or $RUN: not deleting them (rm -rf through a mount would delete what it shows)"
fi
rm -rf "$VAR" "$RUN"
log "removed the cluster's data and state ($VAR, $RUN)"
if ((PURGE)); then
  rm -rf "$CONF_DIR" "$LOGS"
  log "purged $CONF_DIR and $LOGS (the build cache $SHELLBOX_CI_CACHE stays)"
fi
log "done"
