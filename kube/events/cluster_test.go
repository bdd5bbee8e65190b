package events

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/kube/kubetest"
)

// TestClusterRelay, on the real cluster (SHELLBOX_KUBECONFIG): three
// replicas of a release; each one's notices reach the two others, within a
// second, and not itself; the API server accepts the objects as written
// (core/v1 validation: names, involvedObject in the event's namespace).
func TestClusterRelay(t *testing.T) {
	c := kubetest.Connect(t)
	ns := c.Namespace(t)
	reps := []*replica{
		startReplica(t, c.CS, ns, "e2e", "a"),
		startReplica(t, c.CS, ns, "e2e", "b"),
		startReplica(t, c.CS, ns, "e2e", "c"),
	}
	var took []time.Duration
	for round := range 5 {
		for i, from := range reps {
			task := fmt.Sprintf("bg_%d_%d", round, i)
			start := time.Now()
			from.Publish(notice("acme", "s-1", task))
			for j, to := range reps {
				if j == i {
					continue
				}
				got := to.next(t, 5*time.Second)
				if got.Notice.TaskID != task || got.Tenant != "acme" || got.Session != "s-1" {
					t.Fatalf("%s heard %+v, want %s", to.cfg.Instance, got, task)
				}
				took = append(took, time.Since(start))
			}
			from.quiet(t, 0)
		}
	}
	slices.Sort(took)
	t.Logf("publish → heard by another replica: p50 %s, max %s (%d deliveries)",
		took[len(took)/2].Round(time.Millisecond), took[len(took)-1].Round(time.Millisecond), len(took))
	list, err := c.CS.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{LabelSelector: "org.shellbox.event=notice"})
	if err != nil || len(list.Items) != 15 {
		t.Fatalf("%d notice events in %s, want 15: %v", len(list.Items), ns, err)
	}
}
