package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
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
//
// The workspace (SandboxWorkspaceUsage) is read from the same summary:
// the usedBytes of the pod's volume "workspace" (pods[].volume[]). The
// other candidate was the agent: a statfs of /workspace inside the pod,
// over the agent API, which would be current at every pass where the
// kubelet's figure is not. The kubelet is taken for the reasons above
// and for what it costs, which is nothing more: the summary is the one
// Usage fetches in the same pass (no request of its own, no grant beyond
// nodes/proxy), where the agent would take a request per pod per pass and
// a new operation on its wire. What it gives up is freshness: the kubelet
// measures a pod's volumes (a walk of the emptyDir, du-like, on a memory
// emptyDir as on disk: its own cost, paid for eviction whether shellbox
// reads it or not) when it first sees the pod, within a volume period
// (the kubelet's volumeStatsAggPeriod, 1 min by default), then every one
// to two periods (jittered), so a figure may be two minutes old; the
// time returned is the kubelet's, kept as the session's
// WorkspaceMeasured. Until the kubelet has measured a pod, and whenever
// the summary cannot be read, the answer is ErrUnavailable and the
// Sampler keeps the session's last value (never a 0 it did not measure).

// summaryTTL is how long one node's summary answers for its pods: a
// sampling pass reads every pod within it, so a node's summary is asked
// for once per pass, whatever the number of its pods.
const summaryTTL = 2 * time.Second

// maxSummaryBytes bounds one summary's body (a node of 110 pods answers
// about 300 KiB).
const maxSummaryBytes = 16 << 20

// maxNodes bounds the summaries kept.
const maxNodes = 5000

var (
	_ sandbox.UsageReader            = (*Runtime)(nil)
	_ sandbox.SandboxWorkspaceReader = (*Runtime)(nil)
)

// podStats is what a reading keeps of one pod of a node's summary.
type podStats struct {
	c      usage.Counters
	at     time.Time // when the kubelet took the CPU and memory figures
	hasCPU bool
	// ws is the workspace volume's used bytes, measured by the kubelet
	// at wsAt; hasWS: the summary has that figure.
	ws    int64
	wsAt  time.Time
	hasWS bool
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
	ps, node, err := r.podStats(ctx, id)
	if err != nil {
		return usage.Counters{}, time.Time{}, err
	}
	if !ps.hasCPU {
		return usage.Counters{}, time.Time{}, fmt.Errorf("%w: kube: the kubelet of node %s does not report the CPU of pod %s yet", sandbox.ErrUnavailable, node, id)
	}
	return ps.c, ps.at, nil
}

// SandboxWorkspaceUsage measures the workspace of the session pod id (its
// name; a claimed warm-pool pod is not named after its session): the
// used bytes of its workspace volume in the kubelet's summary of its node,
// the summary Usage reads (so no request of its own within a sampling
// pass), and when the kubelet measured them, which may be up to two of
// its volume periods ago (see above). ErrNotFound: the pod is gone;
// ErrUnavailable: no summary, or no measurement of the volume yet.
func (r *Runtime) SandboxWorkspaceUsage(ctx context.Context, id string) (int64, time.Time, error) {
	ps, node, err := r.podStats(ctx, id)
	if err != nil {
		return 0, time.Time{}, err
	}
	if !ps.hasWS {
		return 0, time.Time{}, fmt.Errorf("%w: kube: the kubelet of node %s has not measured the workspace of pod %s yet", sandbox.ErrUnavailable, node, id)
	}
	return ps.ws, ps.wsAt, nil
}

// podStats returns pod id's stats, and its node, from a node's summary
// fetched within summaryTTL, else from its node's summary fetched now.
func (r *Runtime) podStats(ctx context.Context, id string) (podStats, string, error) {
	now := time.Now()
	r.stats.mu.Lock()
	for node, s := range r.stats.nodes {
		if ps, ok := s.pods[id]; ok && now.Sub(s.fetched) < summaryTTL {
			r.stats.mu.Unlock()
			return ps, node, nil
		}
	}
	r.stats.mu.Unlock()
	p, err := r.cs.CoreV1().Pods(r.cfg.Namespace).Get(ctx, id, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return podStats{}, "", fmt.Errorf("%w: kube: pod %s: gone", sandbox.ErrNotFound, id)
		}
		return podStats{}, "", r.convert(err, "pods", "get pod %s", id)
	}
	node := p.Spec.NodeName
	if node == "" {
		return podStats{}, "", fmt.Errorf("%w: kube: pod %s is on no node yet", sandbox.ErrNotFound, id)
	}
	s, err := r.summary(ctx, node)
	if err != nil {
		return podStats{}, node, err
	}
	ps, ok := s.pods[id]
	if !ok {
		return podStats{}, node, fmt.Errorf("%w: kube: the kubelet of node %s does not report pod %s yet", sandbox.ErrUnavailable, node, id)
	}
	return ps, node, nil
}

// summary fetches a node's summary and keeps it.
func (r *Runtime) summary(ctx context.Context, node string) (*nodeSummary, error) {
	body, err := r.cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", node, "proxy", "stats", "summary").Stream(ctx)
	if err != nil {
		return nil, fmt.Errorf("%w: kube: the kubelet summary of node %s (the server needs get on nodes/proxy): %v", sandbox.ErrUnavailable, node, cut(err.Error(), 300))
	}
	defer body.Close()
	raw, err := io.ReadAll(io.LimitReader(body, maxSummaryBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%w: kube: reading the kubelet summary of node %s: %v", sandbox.ErrUnavailable, node, err)
	}
	if len(raw) > maxSummaryBytes {
		return nil, fmt.Errorf("%w: kube: the kubelet summary of node %s is over %d bytes", sandbox.ErrUnavailable, node, maxSummaryBytes)
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
		Volumes []struct {
			Name      string    `json:"name"`
			Time      time.Time `json:"time"`
			UsedBytes *uint64   `json:"usedBytes"`
		} `json:"volume"`
	} `json:"pods"`
}

// parseSummary keeps the figures of the pods of namespace ns: the
// pod-level CPU and memory (left out by a kubelet older than 1.20) and
// the used bytes of the volume volWorkspace; a pod with neither is left
// out.
func parseSummary(raw []byte, ns string) (*nodeSummary, error) {
	var sj summaryJSON
	if err := json.Unmarshal(raw, &sj); err != nil {
		return nil, err
	}
	s := &nodeSummary{pods: map[string]podStats{}}
	for _, p := range sj.Pods {
		if p.PodRef.Namespace != ns {
			continue
		}
		var ps podStats
		if p.CPU != nil && p.CPU.UsageCoreNanoSeconds != nil {
			ps.hasCPU, ps.at = true, p.CPU.Time
			ps.c.CPU = time.Duration(*p.CPU.UsageCoreNanoSeconds)
			if p.Memory != nil && p.Memory.WorkingSetBytes != nil {
				ps.c.MemoryBytes = int64(*p.Memory.WorkingSetBytes)
				ps.c.MemoryPeakBytes = ps.c.MemoryBytes
			}
		}
		for _, v := range p.Volumes {
			if v.Name == volWorkspace && v.UsedBytes != nil && *v.UsedBytes <= math.MaxInt64 {
				ps.hasWS, ps.ws, ps.wsAt = true, int64(*v.UsedBytes), v.Time
			}
		}
		if ps.hasCPU || ps.hasWS {
			s.pods[p.PodRef.Name] = ps
		}
	}
	return s, nil
}
