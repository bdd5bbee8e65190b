package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/usage"
)

// Usage on Kubernetes: where the figures come from, and why there.
//
// The server cannot read a session pod's cgroup: it runs on another node,
// or in a pod without the node's /sys/fs/cgroup. Two readers remain: the
// pod's own agent, reading its container's cgroup from inside, and the
// kubelet, whose summary API (GET /stats/summary, reached through the API
// server's node proxy) reports every pod of its node from the pods'
// cgroups. The kubelet is the one taken, because
//
//   - a command in the sandbox cannot change what the kubelet reports,
//     while under the restricted Pod Security level the agent shares the
//     commands' user, so a command could stop or trace the process whose
//     figures bill its tenant;
//   - one request per node per sampling pass answers for every pod on the
//     node, where the agent would take one per pod;
//   - nothing changes inside the sandbox or on the wire to the agent.
//
// What it costs: the server's service account needs get on nodes/proxy
// (cluster-wide), which reaches the whole kubelet API of every node, not
// only its statistics; a deployment that will not grant it measures
// nothing on Kubernetes (Usage answers sandbox.ErrUnavailable, said once
// in the server's log). And the kubelet refreshes its figures on its own
// housekeeping period (10-15 s), so a reading may be that old: CPU time
// is cumulative, so nothing is lost, only counted a period late, and a
// session's last period is not counted when its pod goes (as a sampling
// interval is not on Docker).
//
// The figures are the pod's (its cgroup: the sandbox container, the
// agent's install container that ran before it, and the pause
// container): CPU usageCoreNanoSeconds, memory workingSetBytes (in use
// less inactive file pages, as on Docker). The summary has no high-water
// mark: MemoryPeakBytes is the working set of the reading, so a session's
// peak is the largest of its readings.

// summaryTTL is how long one node's summary answers for its pods: a
// sampling pass reads every pod within it, so a node's summary is asked
// for once per pass, whatever the number of its pods.
const summaryTTL = 2 * time.Second

// maxSummaryBytes bounds one summary's body (a node of 110 pods answers
// about 300 KiB).
const maxSummaryBytes = 16 << 20

// maxNodes bounds the summaries kept.
const maxNodes = 5000

var _ sandbox.UsageReader = (*Runtime)(nil)

// podStats is what a reading keeps of one pod of a node's summary.
type podStats struct {
	c  usage.Counters
	at time.Time // when the kubelet took the figures
}

// nodeSummary is one node's summary as Usage keeps it: the stats of the
// pods of the runtime's namespace, by name.
type nodeSummary struct {
	fetched time.Time
	pods    map[string]podStats
}

// summaries caches the nodes' summaries of one Runtime.
type summaries struct {
	mu    sync.Mutex
	nodes map[string]*nodeSummary
}

// Usage implements sandbox.UsageReader from the kubelet's summary of the
// pod's node (see above). ErrNotFound: the pod is gone, or not yet on a
// node; ErrUnavailable: the summary could not be read (RBAC's nodes/proxy
// refused, the kubelet did not answer), or does not list the pod yet.
func (r *Runtime) Usage(ctx context.Context, id string) (usage.Counters, error) {
	c, _, err := r.UsageAt(ctx, id)
	return c, err
}

// UsageAt is Usage, and when the kubelet took the figures.
func (r *Runtime) UsageAt(ctx context.Context, id string) (usage.Counters, time.Time, error) {
	now := time.Now()
	r.stats.mu.Lock()
	for _, s := range r.stats.nodes {
		if ps, ok := s.pods[id]; ok && now.Sub(s.fetched) < summaryTTL {
			r.stats.mu.Unlock()
			return ps.c, ps.at, nil
		}
	}
	r.stats.mu.Unlock()
	p, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return usage.Counters{}, time.Time{}, fmt.Errorf("%w: kube: pod %s: gone", sandbox.ErrNotFound, id)
		}
		return usage.Counters{}, time.Time{}, r.convert(err, "pods", "get pod %s", id)
	}
	if p.Spec.NodeName == "" {
		return usage.Counters{}, time.Time{}, fmt.Errorf("%w: kube: pod %s is on no node yet", sandbox.ErrNotFound, id)
	}
	s, err := r.summary(ctx, p.Spec.NodeName)
	if err != nil {
		return usage.Counters{}, time.Time{}, err
	}
	ps, ok := s.pods[id]
	if !ok {
		return usage.Counters{}, time.Time{}, fmt.Errorf("%w: kube: the kubelet of node %s does not report pod %s yet", sandbox.ErrUnavailable, p.Spec.NodeName, id)
	}
	return ps.c, ps.at, nil
}

// summary fetches a node's summary and keeps it.
func (r *Runtime) summary(ctx context.Context, node string) (*nodeSummary, error) {
	raw, err := r.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: kube: the kubelet summary of node %s (the server needs get on nodes/proxy): %v", sandbox.ErrUnavailable, node, cut(err.Error(), 300))
	}
	if len(raw) > maxSummaryBytes {
		return nil, fmt.Errorf("%w: kube: the kubelet summary of node %s is %d bytes, over %d", sandbox.ErrUnavailable, node, len(raw), maxSummaryBytes)
	}
	s, err := parseSummary(raw, r.cfg.Namespace)
	if err != nil {
		return nil, fmt.Errorf("%w: kube: the kubelet summary of node %s: %v", sandbox.ErrUnavailable, node, err)
	}
	s.fetched = time.Now()
	r.stats.mu.Lock()
	defer r.stats.mu.Unlock()
	if r.stats.nodes == nil {
		r.stats.nodes = map[string]*nodeSummary{}
	}
	if _, ok := r.stats.nodes[node]; !ok && len(r.stats.nodes) >= maxNodes {
		for n, old := range r.stats.nodes {
			if s.fetched.Sub(old.fetched) >= summaryTTL {
				delete(r.stats.nodes, n)
			}
		}
	}
	if len(r.stats.nodes) < maxNodes {
		r.stats.nodes[node] = s
	}
	return s, nil
}

// summaryJSON is what Usage reads of the kubelet's stats/v1alpha1 Summary.
type summaryJSON struct {
	Pods []struct {
		PodRef struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"podRef"`
		CPU *struct {
			Time                 time.Time `json:"time"`
			UsageCoreNanoSeconds *uint64   `json:"usageCoreNanoSeconds"`
		} `json:"cpu"`
		Memory *struct {
			Time            time.Time `json:"time"`
			WorkingSetBytes *uint64   `json:"workingSetBytes"`
		} `json:"memory"`
	} `json:"pods"`
}

// parseSummary keeps the figures of the pods of namespace ns: a pod
// without its pod-level CPU figure (a kubelet older than 1.20) is left
// out.
func parseSummary(raw []byte, ns string) (*nodeSummary, error) {
	var sj summaryJSON
	if err := json.Unmarshal(raw, &sj); err != nil {
		return nil, err
	}
	s := &nodeSummary{pods: map[string]podStats{}}
	for _, p := range sj.Pods {
		if p.PodRef.Namespace != ns || p.CPU == nil || p.CPU.UsageCoreNanoSeconds == nil {
			continue
		}
		ps := podStats{c: usage.Counters{CPU: time.Duration(*p.CPU.UsageCoreNanoSeconds)}, at: p.CPU.Time}
		if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
			ps.c.MemoryBytes = int64(*p.Memory.WorkingSetBytes)
			ps.c.MemoryPeakBytes = ps.c.MemoryBytes
		}
		s.pods[p.PodRef.Name] = ps
	}
	return s, nil
}
