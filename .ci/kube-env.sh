# Sourced by setup-kube.sh and teardown-kube.sh (after lib.sh and
# toolchain.sh): the CI cluster's versions, directories, addresses and the
# helpers both use.

K8S_VERSION=v1.37.2
# The etcd of the apiserver's own client (k8s.io/kubernetes v1.37.2's
# go.mod): built in the Kubernetes binaries' module, it raises none of
# their dependencies (v3.7.3 would raise grpc, otel and x/net in them).
ETCD_VERSION=v3.7.0
# The only /v2 version the module proxy lists; only its NetworkPolicy
# controller is built (.ci/kube/netpol.go), on the Kubernetes client.
KUBE_ROUTER_VERSION=v2.1.0
# No kubectl: kc (.ci/kube/kc.go) does what setup-kube.sh asks of the API.
KUBE_BINARIES="kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy"
# One build, one module, one directory: the five, etcd and kube-router
# share every dependency they have in common, compiled once.
KUBE_DIR=$SHELLBOX_CI_CACHE/kubernetes-$K8S_VERSION-etcd-$ETCD_VERSION-kube-router-$KUBE_ROUTER_VERSION
ETCD_DIR=$KUBE_DIR
ROUTER_DIR=$KUBE_DIR

CONF_DIR=/etc/shellbox-kube
PKI=$CONF_DIR/pki
ADMIN_KUBECONFIG=$CONF_DIR/admin.kubeconfig
VAR=/var/lib/shellbox-kube
IMAGES=$VAR/images
RUN=/run/shellbox-kube
LOGS=/var/log/shellbox-kube
CTRD_SOCK=$RUN/containerd.sock
CNI_BIN=/usr/lib/cni
CNI_NET=shellbox-kube
BRIDGE=shellbox-kube0
CLUSTER_CIDR=10.245.0.0/16
POD_CIDR=10.245.0.0/24
SVC_CIDR=10.97.0.0/24
KUBE_SVC_IP=10.97.0.1
PAUSE_IMAGE=shellbox-ci/pause:1
# kube's Config.AgentImage and AgentPath in the tests.
AGENT_IMAGE=shellbox-agent:ci
AGENT_PATH=/usr/local/bin/shellbox-agent
# The server image (images.BuildServerImage): what the chart installs in the
# chart tests (deploy/helm/e2e), holding the agent the session pods copy.
SERVER_IMAGE=shellbox:ci
TEST_IMAGE=${SHELLBOX_TEST_IMAGE:-shellbox-test:latest}
# Daemons in start order (teardown stops them in reverse).
DAEMONS="etcd kube-apiserver kube-controller-manager kube-scheduler containerd kubelet kube-proxy kube-router"
# Set by the kubelet at start (protectKernelDefaults false): restored by teardown.
KUBELET_SYSCTLS="vm.overcommit_memory vm.panic_on_oom kernel.panic kernel.panic_on_oops kernel.keys.root_maxkeys kernel.keys.root_maxbytes"
# Paths the kubelet and libcni use whatever they are told: teardown removes
# those that did not exist before the first setup.
SYSTEM_DIRS="/var/lib/kubelet /var/log/containers /var/log/pods /var/lib/cni"

NODE_NAME=$(hostname | tr 'A-Z_' 'a-z-')
if [[ -z "${NODE_IP:-}" ]]; then
  _dev=$(ip -4 route show default 2>/dev/null | awk 'NR == 1 {print $5}')
  NODE_IP=$(ip -4 -o addr show dev "${_dev:-lo}" 2>/dev/null | awk 'NR == 1 {print $4}' | cut -d/ -f1)
  NODE_IP=${NODE_IP:-127.0.0.1}
fi

# daemon_pid NAME: the recorded pid, if alive and still running the binary
# recorded with it (a recycled pid is never ours).
daemon_pid() {
  local pid exe want
  [[ -s "$RUN/$1.pid" ]] || return 0
  pid=$(<"$RUN/$1.pid")
  want=$(cat "$RUN/$1.exe" 2>/dev/null) || return 0
  pid_alive "$pid" || return 0
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 0
  if [[ "$exe" == "$want" || "$exe" == "$want (deleted)" ]]; then echo "$pid"; fi
}

# stop_daemon NAME [SECONDS]: SIGTERM, SIGKILL after SECONDS (default 20).
stop_daemon() {
  local name=$1 pid
  pid=$(daemon_pid "$name")
  if [[ -n "$pid" ]]; then
    stop_pid "$pid" "$name" "${2:-20}"
    log "stopped $name (pid $pid)"
  fi
  rm -f "$RUN/$name.pid" "$RUN/$name.exe" "$RUN/$name.hash"
}

# kc: .ci/kube/kc.go, built by setup-kube.sh's images step.
kc() { "$IMAGES/kc" -kubeconfig "$ADMIN_KUBECONFIG" "$@"; }
# ctr_: ctr on the cluster's containerd, namespace k8s.io.
ctr_() { quiet_ctr "$CONTAINERD_DIR/ctr" --address "$CTRD_SOCK" --namespace k8s.io "$@"; }
