#!/usr/bin/env bash
# Brings up a real single-node Kubernetes cluster for shellbox's kube/
# tests, on a CI machine (Debian 12, root, no systemd, cgroup v1) with no
# registry: every binary is built from the Go module proxy, every image is
# built here and imported into the cluster's own containerd.
#
#   1. Debian packages: runc, the CNI plugins, iptables, ipset, conntrack,
#      openssl, curl (only the missing ones are installed);
#   2. binaries, cached outside the clone by version (built once):
#        $SHELLBOX_CI_CACHE/kubernetes-<v>-etcd-<v>-kube-router-<v>/
#          kube-apiserver, -controller-manager, -scheduler, kubelet,
#          kube-proxy (no kubectl: .ci/kube/kc.go does what this script asks
#          of the API), etcd, and kube-router's NetworkPolicy controller
#          (.ci/kube/netpol.go), in one `go build` of one module;
#      and containerd v2 and gVisor (runsc, patched shim) from toolchain.sh,
#      the same builds setup-containerd.sh uses;
#   3. images, built here (.ci/kube/image.go, on the images package's OCI
#      archive writer): the pod sandbox (pause) and shellbox-agent:ci, which
#      holds the static agent built from this checkout at
#      /usr/local/bin/shellbox-agent (kube's init container copies
#      it); shellbox:ci, the server image (`shellbox image build --server`)
#      that the chart tests (deploy/helm/e2e) install; and the test image
#      shellbox-test:latest, exported from Docker as
#      setup-containerd.sh does, and the clients image
#      shellbox-test-clients:latest (git, python3 with requests, node: the
#      credential tests' clients, kube TestClusterCredentialClients) when
#      Docker has it. Imported into namespace k8s.io, each only when changed;
#   4. a PKI (openssl), kubeconfigs, and the daemons, as plain processes
#      (setsid, pid files): etcd, kube-apiserver (RBAC, NodeRestriction),
#      kube-controller-manager, kube-scheduler, a containerd of its own (CRI,
#      runc and runsc handlers, a CNI bridge), kubelet, kube-proxy (iptables),
#      kube-router (NetworkPolicy, firewall only);
#   5. waits for the node to be Ready and applies the RuntimeClass gvisor
#      (handler runsc).
#
# Everything of the cluster is under its own directories, so Docker's
# containerd and setup-containerd.sh's (/run/shellbox-containerd) are never
# touched:
#   config, PKI, kubeconfigs  /etc/shellbox-kube (admin: admin.kubeconfig)
#   data                      /var/lib/shellbox-kube (etcd, containerd root, kubelet)
#   state, sockets, pids      /run/shellbox-kube
#   logs                      /var/log/shellbox-kube/<daemon>.log
#   CNI bridge                shellbox-kube0, pods 10.245.0.0/24, services 10.97.0.0/24
# What the kubelet writes at fixed paths whatever it is told
# (/var/lib/kubelet/device-plugins, /var/log/containers, /var/lib/cni) and the
# sysctls it sets (kernel.panic, ...) are undone by .ci/teardown-kube.sh.
#
# Idempotent: a daemon already running on the same binary and configuration
# is left alone, an unchanged image is not imported again; a second run takes
# about a second. Prints the time of each step, and at the end:
#   export SHELLBOX_KUBECONFIG=/etc/shellbox-kube/admin.kubeconfig
#
# Why some settings (each found on the CI machine when the cluster first
# failed without it): root here lacks CAP_SYS_RESOURCE, so no oom_score_adj below 0 can be set
# (restrict_oom_score_adj in the CRI config, oomScoreAdj 0 for kubelet and
# kube-proxy, gVisor's shim patched in toolchain.sh); cgroup v1 needs
# failCgroupV1: false; kube-router starts after the Node exists.
#
# Environment:
#   SHELLBOX_CI_CACHE       build cache (default /var/cache/shellbox-ci)
#   SHELLBOX_CI_REBUILD=1   rebuild every binary
#   SHELLBOX_KUBE_BUILD_ONLY=1  only build the Kubernetes binaries, etcd,
#                           kube-router and the programs of the images: no
#                           packages, no containerd or gVisor (setup-docker.sh
#                           and setup-containerd.sh build those), nothing
#                           started. .ci/run runs that in the background from
#                           its start, beside the Docker and containerd setup.
#   SHELLBOX_TEST_IMAGE     test image to import (default shellbox-test:latest)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CI_NAME=setup-kube
CI_LOG_ELAPSED=1
# shellcheck source=lib.sh
source "$HERE/lib.sh"
# shellcheck source=toolchain.sh
source "$HERE/toolchain.sh"
# shellcheck source=kube-env.sh
source "$HERE/kube-env.sh"

[[ $(id -u) == 0 ]] || die "must run as root (it starts the cluster's daemons)"
command -v go >/dev/null || die "go is not installed (looked in PATH and /usr/local/go/bin)"

BUILD_ONLY=${SHELLBOX_KUBE_BUILD_ONLY:-0}

# --- 1. packages ------------------------------------------------------------------
# Not in the background build: apt-get would meet the foreground's on dpkg's lock.
if [[ "$BUILD_ONLY" != 1 ]]; then
  step packages
  apt_install runc containernetworking-plugins iptables ipset conntrack openssl curl
  [[ -x $CNI_BIN/bridge && -x $CNI_BIN/host-local ]] || die "no CNI plugins in $CNI_BIN (Debian: containernetworking-plugins)"
fi

# --- 2. binaries ------------------------------------------------------------------
step binaries

# kube_ok DIR: the binaries run and say their versions.
kube_ok() {
  local d=$1 c
  [[ -e "$d/.complete" ]] || return 1
  for c in $KUBE_BINARIES; do
    grep -qF "$K8S_VERSION" <<<"$("$d/$c" --version 2>/dev/null)" || return 1
  done
  grep -qF "${ETCD_VERSION#v}" <<<"$("$d/etcd" --version 2>&1)" &&
    grep -qF "$KUBE_ROUTER_VERSION" <<<"$("$d/kube-router" --version 2>&1)"
}

# build_kube: the cluster's binaries in one module and one `go build`:
# k8s.io/kubernetes' five commands, etcd's server and kube-router's
# NetworkPolicy controller (.ci/kube/netpol.go, a main of the module) share
# client-go, grpc, protobuf, ... compiled once (etcd and kube-router built
# apart took 68 s and 208 s more of the 2 cores, cold).
# k8s.io/kubernetes is not meant to be a dependency: its go.mod
# replaces every staging module (k8s.io/api, ...) with ./staging/src/..., and
# a dependency's replaces are ignored, so the build module replaces each with
# its v0.X.Y release instead (the list generated from kubernetes' go.mod);
# kube-router's k8s.io requirements take the same releases.
build_kube() {
  build_cached "kubernetes $K8S_VERSION ($(wc -w <<<"$KUBE_BINARIES") binaries), etcd $ETCD_VERSION, kube-router $KUBE_ROUTER_VERSION (NetworkPolicy); 10 min of 2 cores cold" "$KUBE_DIR" kube_ok _build_kube
}
_build_kube() {
  local tmp=$1 gomod staging p ld c
  staging="v0.${K8S_VERSION#v1.}"
  gomod=$(cd "$tmp/src" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [[ -s "$gomod" ]] || die "cannot fetch k8s.io/kubernetes@$K8S_VERSION from the module proxy"
  {
    printf 'module shellbox-ci/kubernetes\n\ngo 1.26.0\n\nrequire (\n'
    printf '\tk8s.io/kubernetes %s\n\tgo.etcd.io/etcd/server/v3 %s\n\tgithub.com/cloudnativelabs/kube-router/v2 %s\n)\n\nreplace (\n' \
      "$K8S_VERSION" "$ETCD_VERSION" "$KUBE_ROUTER_VERSION"
    sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/.*#\t\1 => \1 '"$staging"'#p' "$gomod"
    printf ')\n'
  } >"$tmp/src/go.mod"
  # The repository's copy is "ignore": shellbox's module never builds it.
  mkdir "$tmp/src/kube-router"
  grep -v '^//go:build ignore$' "$HERE/kube/netpol.go" >"$tmp/src/kube-router/main.go"
  ld="-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
  for p in k8s.io/client-go/pkg/version k8s.io/component-base/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$(cut -d. -f2 <<<"$K8S_VERSION")"
    ld+=" -X $p.gitTreeState=clean -X $p.gitCommit=go-module-proxy -X $p.buildDate=1970-01-01T00:00:00Z"
  done
  build_in_module "$tmp/src" "$ld" "$tmp/bin" \
    $(for c in $KUBE_BINARIES; do echo "k8s.io/kubernetes/cmd/$c"; done) \
    go.etcd.io/etcd/server/v3 shellbox-ci/kubernetes/kube-router || return 1
  # go names etcd's binary after its package, without the /v3.
  mv "$tmp/bin/server" "$tmp/bin/etcd"
  touch "$tmp/bin/.complete"
}

build_kube
if [[ "$BUILD_ONLY" != 1 ]]; then
  build_containerd
  build_gvisor
fi

# --- 3. images ----------------------------------------------------------------------
# Built every run from this checkout (the agent changes with it; a warm Go
# cache makes it a few seconds), imported only when the digest changed.
step images
mkdir -p "$IMAGES" "$VAR" "$RUN" "$LOGS" "$PKI" "$CONF_DIR/cni"
(
  cd "$HERE/.."
  export CGO_ENABLED=0 GOFLAGS=-buildvcs=false
  go build -trimpath -ldflags "-s -w" -o "$IMAGES/pause" .ci/kube/pause.go
  go build -trimpath -o "$IMAGES/shellbox-agent" ./cmd/shellbox-agent
  go build -trimpath -o "$IMAGES/shellbox" ./cmd/shellbox
  go build -o "$IMAGES/image" .ci/kube/image.go
  # after cmd/shellbox, whose client-go packages it shares (same flags)
  go build -trimpath -o "$IMAGES/kc" .ci/kube/kc.go
) || die "building the pause program, the agent or the image and API helpers failed (output above)"
if [[ "$BUILD_ONLY" == 1 ]]; then
  step done
  log "steps: ${CI_STEPS[*]}"
  log "SHELLBOX_KUBE_BUILD_ONLY=1: binaries built, nothing started"
  exit 0
fi
"$IMAGES/image" -name "$PAUSE_IMAGE" -binary "$IMAGES/pause" -path /pause -out "$IMAGES/pause.tar" >"$IMAGES/pause.digest" ||
  die "writing the pause image failed"
"$IMAGES/image" -name "$AGENT_IMAGE" -binary "$IMAGES/shellbox-agent" -path "$AGENT_PATH" -out "$IMAGES/agent.tar" >"$IMAGES/agent.digest" ||
  die "writing the agent image failed"
"$IMAGES/shellbox" image build --server --shellbox "$IMAGES/shellbox" --agent "$IMAGES/shellbox-agent" \
  --tag "$SERVER_IMAGE" --output "$IMAGES/server.tar" >"$IMAGES/server.log" 2>&1 ||
  die "writing the server image failed: $(tail -5 "$IMAGES/server.log")"
if ! docker image inspect "$TEST_IMAGE" >/dev/null 2>&1; then
  [[ -x "$HERE/../images/testimage/build.sh" || -f "$HERE/../images/testimage/build.sh" ]] || die "no $TEST_IMAGE in Docker"
  log "Docker has no $TEST_IMAGE: building it (images/testimage/build.sh)"
  bash "$HERE/../images/testimage/build.sh" >/dev/null || die "images/testimage/build.sh failed"
fi
docker_id=$(docker image inspect -f '{{.Id}}' "$TEST_IMAGE") || die "docker image inspect $TEST_IMAGE failed"
log "images built: pause $(cut -c8-19 "$IMAGES/pause.digest"), agent $(cut -c8-19 "$IMAGES/agent.digest"), test image ${docker_id:7:12}"

# --- 4. PKI ---------------------------------------------------------------------------
step pki
# cert NAME SUBJECT EXTENDED_KEY_USAGE [SUBJECT_ALT_NAMES] [CA]: a key and a
# certificate signed by CA (default ca), unless both exist.
cert() {
  local name=$1 subj=$2 eku=$3 sans=${4:-} ca=${5:-ca}
  [[ -s "$PKI/$name.crt" && -s "$PKI/$name.key" ]] && return 0
  openssl req -new -nodes -newkey rsa:2048 -keyout "$PKI/$name.key" -out "$PKI/$name.csr" -subj "$subj" 2>/dev/null
  {
    echo "basicConstraints=critical,CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$eku"
    [[ -z "$sans" ]] || echo "subjectAltName=$sans"
  } >"$PKI/$name.ext"
  openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/$ca.crt" -CAkey "$PKI/$ca.key" -CAcreateserial \
    -out "$PKI/$name.crt" -days 825 -sha256 -extfile "$PKI/$name.ext" 2>/dev/null || die "signing $name failed"
  rm -f "$PKI/$name.csr" "$PKI/$name.ext"
  chmod 600 "$PKI/$name.key"
}
ca() { # NAME CN
  [[ -s "$PKI/$1.crt" && -s "$PKI/$1.key" ]] && return 0
  openssl req -x509 -new -nodes -newkey rsa:2048 -keyout "$PKI/$1.key" -out "$PKI/$1.crt" -days 3650 \
    -subj "/CN=$2" -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,digitalSignature,keyEncipherment,keyCertSign" 2>/dev/null || die "creating CA $1 failed"
  chmod 600 "$PKI/$1.key"
}
chmod 700 "$PKI"
# Serving certificates name the node: made again when it changed.
if [[ "$(cat "$PKI/.node" 2>/dev/null)" != "$NODE_NAME $NODE_IP" ]]; then
  rm -f "$PKI"/kube-apiserver.* "$PKI"/kubelet-serving.* "$PKI"/kubelet-client.*
  echo "$NODE_NAME $NODE_IP" >"$PKI/.node"
fi
ca ca shellbox-kube-ca
# The aggregation layer's front proxy: without it the controller manager and
# the scheduler log "missing content for CA bundle ... requestheader-client-ca-file".
ca front-proxy-ca shellbox-kube-front-proxy-ca
cert etcd-server "/CN=etcd-server" serverAuth,clientAuth "DNS:localhost,IP:127.0.0.1"
cert apiserver-etcd-client "/CN=kube-apiserver-etcd-client" clientAuth
cert kube-apiserver "/CN=kube-apiserver" serverAuth \
  "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local,DNS:localhost,DNS:$NODE_NAME,IP:127.0.0.1,IP:$KUBE_SVC_IP,IP:$NODE_IP"
cert apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" clientAuth
cert admin "/O=system:masters/CN=shellbox-kube-admin" clientAuth
cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
cert kube-router "/CN=system:kube-router" clientAuth
cert kubelet-client "/O=system:nodes/CN=system:node:$NODE_NAME" clientAuth
cert kubelet-serving "/CN=$NODE_NAME" serverAuth "DNS:$NODE_NAME,DNS:localhost,IP:$NODE_IP,IP:127.0.0.1"
cert front-proxy-client "/CN=front-proxy-client" clientAuth "" front-proxy-ca
if [[ ! -s "$PKI/sa.key" ]]; then
  openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null && openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null ||
    die "creating the service-account key failed"
  chmod 600 "$PKI/sa.key"
fi

# --- 5. configuration ---------------------------------------------------------------
step config
# Files are rewritten only when they change (write_file): a daemon restarts
# when a file it names changes, and kube-proxy exits when its config file is
# rewritten under it.
kubeconfig() { # NAME CERT
  write_file 0600 "$CONF_DIR/$1.kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: shellbox-kube
  cluster:
    server: https://127.0.0.1:6443
    certificate-authority: $PKI/ca.crt
users:
- name: $1
  user:
    client-certificate: $PKI/$2.crt
    client-key: $PKI/$2.key
contexts:
- name: shellbox-kube
  context: {cluster: shellbox-kube, user: $1}
current-context: shellbox-kube
EOF
}
for k in admin kube-controller-manager kube-scheduler kube-proxy kube-router; do kubeconfig "$k" "$k"; done
kubeconfig kubelet kubelet-client

write_file 0600 "$CONF_DIR/containerd.toml" <<EOF
# The cluster's own containerd (.ci/setup-kube.sh): CRI for the kubelet.
version = 3
root = "$VAR/containerd"
state = "$RUN/containerd"
# No oom_score: root on this machine lacks CAP_SYS_RESOURCE.
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "$CTRD_SOCK"
[ttrpc]
  address = ""
[debug]
  address = ""
  level = "info"
[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$VAR/containerd-opt"
  [plugins.'io.containerd.shim.v1.manager']
    # default /run/containerd/s, shared with any other containerd
    socket_dir = "$RUN/s"
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"
  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    cdi_spec_dirs = []
    # Pod network namespaces under the state dir, not /var/run/netns.
    netns_mounts_under_state_dir = true
    # Clamp every container's oom_score_adj to containerd's own (0): runc
    # cannot write the pause container's -998 here ("nsexec: failed to
    # update /proc/self/oom_score_adj: Permission denied").
    restrict_oom_score_adj = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$(command -v runc)"
          Root = "$RUN/runc"
          SystemdCgroup = false
      # RuntimeClass gvisor -> handler runsc -> containerd-shim-runsc-v1 (PATH)
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc]
        runtime_type = "io.containerd.runsc.v1"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runsc.options]
          TypeUrl = "io.containerd.runsc.v1.options"
          ConfigPath = "$CONF_DIR/runsc.toml"
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$CNI_BIN"]
      conf_dir = "$CONF_DIR/cni"
      max_conf_num = 1
  [plugins.'io.containerd.grpc.v1.cri']
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF

# gVisor in a pod: the pod's network namespace (netstack), systrap, and the
# pod's seccomp profile applied inside too (as on Docker: oci-seccomp).
write_file 0600 "$CONF_DIR/runsc.toml" <<EOF
binary_name = "$GVISOR_DIR/runsc"
root = "$RUN/runsc"
[runsc_config]
  platform = "systrap"
  oci-seccomp = "true"
EOF

# "firewall" accepts the pods' traffic in FORWARD, whose policy Docker set to DROP.
write_file 0600 "$CONF_DIR/cni/10-shellbox-kube.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NET",
  "plugins": [
    {
      "type": "bridge", "bridge": "$BRIDGE", "isGateway": true, "ipMasq": true, "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$VAR/cni", "ranges": [[{"subnet": "$POD_CIDR"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}},
    {"type": "firewall", "backend": "iptables"}
  ]
}
EOF

write_file 0600 "$CONF_DIR/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
# cgroup v1 here: Kubernetes >= 1.35 refuses it unless told otherwise
failCgroupV1: false
cgroupDriver: cgroupfs
containerRuntimeEndpoint: unix://$CTRD_SOCK
imageServiceEndpoint: unix://$CTRD_SOCK
address: $NODE_IP
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
rotateCertificates: false
clusterDomain: cluster.local
resolvConf: /etc/resolv.conf
podLogsDir: $VAR/pod-logs
failSwapOn: false
# TestLoad's chart target runs 200 session pods beside the servers and the
# system's; the CNI's host-local range (POD_CIDR, a /24) hands out .2-.254,
# 253 addresses, so 250 pods always get one.
maxPods: 250
# kube: the pids limit of a pod is the node's (runc), below what the
# smallest test session's memory (256 MiB) holds of bash processes (~170 KiB
# each): a fork bomb that fills the memory first thrashes the pod and gets the
# agent OOM-killed (docs/deployment.md).
podPidsLimit: 1024
# A busy CI disk must not evict the test pods nor collect the imported
# images (there is no registry to pull them again).
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
imageGCHighThresholdPercent: 100
containerLogMaxSize: 10Mi
# the default -999 needs CAP_SYS_RESOURCE
oomScoreAdj: 0
EOF

write_file 0600 "$CONF_DIR/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $CONF_DIR/kube-proxy.kubeconfig}
mode: iptables
clusterCIDR: $CLUSTER_CIDR
hostnameOverride: $NODE_NAME
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
# leave the machine's conntrack sysctls alone
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
nodePortAddresses: [primary]
iptables: {localhostNodePorts: false}
oomScoreAdj: 0
EOF

# --- 6. daemons ---------------------------------------------------------------------
step control-plane
STARTED=" "
# daemon_hash ARGS...: the command line and the content of every config
# file it names, so a changed file restarts the daemon.
daemon_hash() {
  local a f
  {
    echo "$*"
    for a in "$@"; do
      f=${a#*=}
      if [[ "$f" == "$CONF_DIR"/* && -f "$f" ]]; then cat "$f"; fi
    done
  } | sha256sum | cut -d' ' -f1
}
# start_daemon NAME EXE ARGS...: started detached (setsid, output to its
# log) unless it runs already on the same binary, arguments and files.
start_daemon() {
  local name=$1 exe=$2 pid h
  shift 2
  h=$(daemon_hash "$exe" "$@")
  pid=$(daemon_pid "$name")
  if [[ -n "$pid" ]]; then
    if [[ "$(cat "$RUN/$name.hash" 2>/dev/null)" == "$h" ]]; then return 0; fi
    log "$name: binary, arguments or configuration changed: restarting it"
    stop_daemon "$name"
  fi
  echo "=== $(date -u +%FT%TZ) setup-kube: $exe $*" >>"$LOGS/$name.log"
  PATH="$CONTAINERD_DIR:$GVISOR_DIR:$KUBE_DIR:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
    setsid "$exe" "$@" >>"$LOGS/$name.log" 2>&1 </dev/null &
  echo $! >"$RUN/$name.pid"
  echo "$exe" >"$RUN/$name.exe"
  echo "$h" >"$RUN/$name.hash"
  STARTED+="$name "
  log "started $name (pid $!)"
}
# wait_daemon DESC SECONDS DAEMON CMD...: polls CMD (wait_for); fails with
# the daemon's log when it exits or SECONDS pass.
wait_daemon() {
  local desc=$1 timeout=$2 daemon=$3 rc=0
  shift 3
  wait_for "$desc" "$timeout" "${daemon:+daemon_running $daemon}" "$@" || rc=$?
  ((rc)) || return 0
  [[ -z "$daemon" ]] || tail -n 20 "$LOGS/$daemon.log" >&2
  ((rc == 1)) || die "$daemon exited while waiting for $desc (log above, all of it in $LOGS/$daemon.log)"
  die "timed out after ${timeout}s waiting for $desc (logs in $LOGS)"
}
daemon_running() { [[ -n "$(daemon_pid "$1")" ]]; }
etcd_ok() { curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/apiserver-etcd-client.crt" --key "$PKI/apiserver-etcd-client.key" https://127.0.0.1:2379/health; }
apiserver_ok() { curl -sf --max-time 2 --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" https://127.0.0.1:6443/readyz; }

start_daemon etcd "$ETCD_DIR/etcd" --name shellbox-kube --data-dir "$VAR/etcd" \
  --listen-client-urls https://127.0.0.1:2379 --advertise-client-urls https://127.0.0.1:2379 \
  --listen-peer-urls http://127.0.0.1:2380 --initial-advertise-peer-urls http://127.0.0.1:2380 \
  --initial-cluster shellbox-kube=http://127.0.0.1:2380 --initial-cluster-state new \
  --listen-metrics-urls http://127.0.0.1:2381 \
  --cert-file "$PKI/etcd-server.crt" --key-file "$PKI/etcd-server.key" --trusted-ca-file "$PKI/ca.crt" --client-cert-auth
wait_daemon "etcd healthy" 60 etcd etcd_ok

start_daemon kube-apiserver "$KUBE_DIR/kube-apiserver" \
  --advertise-address="$NODE_IP" --bind-address=0.0.0.0 --secure-port=6443 \
  --etcd-servers=https://127.0.0.1:2379 --etcd-cafile="$PKI/ca.crt" \
  --etcd-certfile="$PKI/apiserver-etcd-client.crt" --etcd-keyfile="$PKI/apiserver-etcd-client.key" \
  --tls-cert-file="$PKI/kube-apiserver.crt" --tls-private-key-file="$PKI/kube-apiserver.key" \
  --client-ca-file="$PKI/ca.crt" \
  --kubelet-client-certificate="$PKI/apiserver-kubelet-client.crt" --kubelet-client-key="$PKI/apiserver-kubelet-client.key" \
  --kubelet-certificate-authority="$PKI/ca.crt" --kubelet-preferred-address-types=InternalIP,Hostname \
  --service-account-issuer=https://kubernetes.default.svc.cluster.local \
  --service-account-key-file="$PKI/sa.pub" --service-account-signing-key-file="$PKI/sa.key" \
  --service-cluster-ip-range="$SVC_CIDR" \
  --requestheader-client-ca-file="$PKI/front-proxy-ca.crt" --requestheader-allowed-names=front-proxy-client \
  --requestheader-username-headers=X-Remote-User --requestheader-group-headers=X-Remote-Group \
  --requestheader-extra-headers-prefix=X-Remote-Extra- \
  --proxy-client-cert-file="$PKI/front-proxy-client.crt" --proxy-client-key-file="$PKI/front-proxy-client.key" \
  --authorization-mode=Node,RBAC --enable-admission-plugins=NodeRestriction \
  --allow-privileged=true --profiling=false --shutdown-watch-termination-grace-period=3s
wait_daemon "kube-apiserver ready" 120 kube-apiserver apiserver_ok

start_daemon kube-controller-manager "$KUBE_DIR/kube-controller-manager" \
  --kubeconfig="$CONF_DIR/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig="$CONF_DIR/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig="$CONF_DIR/kube-controller-manager.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --use-service-account-credentials=true \
  --service-account-private-key-file="$PKI/sa.key" --root-ca-file="$PKI/ca.crt" \
  --cluster-signing-cert-file="$PKI/ca.crt" --cluster-signing-key-file="$PKI/ca.key" \
  --allocate-node-cidrs=true --cluster-cidr="$CLUSTER_CIDR" --node-cidr-mask-size=24 \
  --service-cluster-ip-range="$SVC_CIDR" --profiling=false
start_daemon kube-scheduler "$KUBE_DIR/kube-scheduler" \
  --kubeconfig="$CONF_DIR/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig="$CONF_DIR/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig="$CONF_DIR/kube-scheduler.kubeconfig" \
  --bind-address=127.0.0.1 --leader-elect=false --profiling=false

step node
start_daemon containerd "$CONTAINERD_DIR/containerd" --config "$CONF_DIR/containerd.toml"
wait_daemon "containerd answers" 60 containerd ctr_ version

# Images: imported when the image in containerd is not the one just built
# (the manifest digest, or for the test image Docker's image id, as a label).
import_image() { # NAME ARCHIVE|- KEY
  local name=$1 archive=$2 key=$3
  if ctr_ images ls "name==$name" 2>/dev/null | grep -qF "org.shellbox.ci=$key"; then return 0; fi
  if [[ "$archive" == - ]]; then
    docker save "$name" | ctr_ images import --snapshotter overlayfs - >/dev/null || die "importing $name from Docker failed"
  else
    ctr_ images import --snapshotter overlayfs "$archive" >/dev/null || die "importing $archive failed"
  fi
  local full=$name
  [[ "$name" == */* ]] || full=docker.io/library/$name
  if [[ "$full" != "$name" ]] && ctr_ images ls -q "name==$full" | grep -qxF "$full"; then
    ctr_ images tag --force "$full" "$name" >/dev/null || die "cannot tag $full as $name"
  fi
  ctr_ images label "$name" "org.shellbox.ci=$key" >/dev/null || die "cannot label $name"
  log "imported $name"
}
import_image "$PAUSE_IMAGE" "$IMAGES/pause.tar" "$(cut -d' ' -f1 "$IMAGES/pause.digest")"
import_image "$AGENT_IMAGE" "$IMAGES/agent.tar" "$(cut -d' ' -f1 "$IMAGES/agent.digest")"
import_image "$SERVER_IMAGE" "$IMAGES/server.tar" "sha256:$(sha256sum "$IMAGES/server.tar" | cut -c1-64)"
import_image "$TEST_IMAGE" - "$docker_id"
# The clients image (build.sh --clients, which setup-docker.sh runs) is made
# from the host's own clients, so only Docker's copy exists: without it
# nothing is imported and kube TestClusterCredentialClients says so (fails
# under CI=true). Keyed by Docker's image id, as the test image.
CLIENTS_IMAGE=shellbox-test-clients:latest
if clients_id=$(docker image inspect -f '{{.Id}}' "$CLIENTS_IMAGE" 2>/dev/null); then
  t_clients=${EPOCHREALTIME/./}
  if ctr_ images ls "name==$CLIENTS_IMAGE" 2>/dev/null | grep -qF "org.shellbox.ci=$clients_id"; then
    log "$CLIENTS_IMAGE is imported (Docker image ${clients_id:7:12})"
  else
    import_image "$CLIENTS_IMAGE" - "$clients_id"
    log "$CLIENTS_IMAGE (Docker image ${clients_id:7:12}) imported in $(elapsed "$t_clients")s"
  fi
else
  log "Docker has no $CLIENTS_IMAGE: not imported (images/testimage/build.sh --clients builds it)"
fi

# The kubelet rewrites some kernel sysctls at start: keep the originals once
# (teardown-kube.sh restores them).
if [[ ! -s "$VAR/sysctl.orig" ]]; then
  for k in $KUBELET_SYSCTLS; do echo "$k=$(sysctl -n "$k")"; done >"$VAR/sysctl.orig"
fi
# Which of the kubelet's fixed paths existed before (teardown leaves those).
if [[ ! -e "$VAR/preexisting" ]]; then
  for d in $SYSTEM_DIRS; do [[ -e "$d" ]] && echo "$d"; done >"$VAR/preexisting" || true
fi
mkdir -p "$VAR/kubelet" "$VAR/pod-logs"
start_daemon kubelet "$KUBE_DIR/kubelet" --config="$CONF_DIR/kubelet.yaml" --kubeconfig="$CONF_DIR/kubelet.kubeconfig" \
  --root-dir="$VAR/kubelet" --hostname-override="$NODE_NAME" --node-ip="$NODE_IP"
start_daemon kube-proxy "$KUBE_DIR/kube-proxy" --config="$CONF_DIR/kube-proxy.yaml"

# Ready, and (after a restart of the kubelet) posted by this kubelet: etcd
# may hold the Ready condition of an earlier one.
node_ready() {
  local since=0
  [[ "$STARTED" != *" kubelet "* ]] || since=${CI_T0:0:10}
  kc ready "$NODE_NAME" "$since"
}
wait_daemon "node $NODE_NAME Ready" 120 kubelet node_ready

step cluster-objects
kc apply <<EOF || die "applying the RuntimeClass and kube-router's RBAC failed"
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: gvisor}
handler: runsc
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: shellbox-kube:kube-router}
rules:
- apiGroups: [""]
  resources: [namespaces, pods, services, nodes, endpoints]
  verbs: [list, get, watch]
- apiGroups: [networking.k8s.io]
  resources: [networkpolicies]
  verbs: [list, get, watch]
- apiGroups: [discovery.k8s.io]
  resources: [endpointslices]
  verbs: [list, get, watch]
- apiGroups: [coordination.k8s.io]
  resources: [leases]
  verbs: [get, create, update]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {name: shellbox-kube:kube-router}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: shellbox-kube:kube-router}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: system:kube-router}
EOF
log "RuntimeClass gvisor (handler runsc)"
# NetworkPolicy: kube-router needs the Node object to exist.
start_daemon kube-router "$ROUTER_DIR/kube-router" --kubeconfig="$CONF_DIR/kube-router.kubeconfig" \
  --hostname-override="$NODE_NAME" --run-firewall=true --run-router=false --run-service-proxy=false \
  --enable-cni=false --enable-pod-egress=false --health-port=0 --metrics-port=0 \
  --service-cluster-ip-range="$SVC_CIDR" --iptables-sync-period=1m
wait_daemon "kube-router running" 30 kube-router sleep 0.3
# Pods can be created once the namespace has its default ServiceAccount.
wait_daemon "default ServiceAccount" 60 "" kc serviceaccount default default

step done
log "steps: ${CI_STEPS[*]}"
log "cluster up in $(elapsed "$CI_T0")s; kubeconfig: $ADMIN_KUBECONFIG"
echo "export SHELLBOX_KUBECONFIG=$ADMIN_KUBECONFIG"
