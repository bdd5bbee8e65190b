package e2e

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/kube/kubetest"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// TestReplicaEvents: with two replicas, a background task started through
// one (A) ends and the other's (B) event stream hears its notice, B's next
// tool result for the session carries it, and the notice is an Event
// object in the sessions namespace, as an operator lists them.
func TestReplicaEvents(t *testing.T) {
	c := kubetest.Connect(t)
	r := Install(t, c, Options{
		Tenants: []Tenant{{Name: "acme", Policy: "version: 1\ndefault: allow\nsandbox:\n  runtime: runc\n"}},
		Values:  map[string]any{"replicaCount": 2},
	})
	pods := r.readyServerPods(t, 2)
	names := []string{pods[0].Name, pods[1].Name}
	a := client.New(podURL(pods[0]), r.Tokens["acme"], nil)
	b := client.New(podURL(pods[1]), r.Tokens["acme"], nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The session's pod first (a cold start), so the task below ends
	// while the stream on B is open.
	if res, err := a.Call(ctx, "s1", "bash", json.RawMessage(`{"command":"true","description":"make the sandbox"}`)); err != nil || res.IsError {
		t.Fatalf("first call through %s: %v %+v", names[0], err, res)
	}
	stream, err := b.Subscribe(ctx, "s1")
	if err != nil {
		t.Fatalf("events on %s: %v", names[1], err)
	}
	defer stream.Close()
	res, err := a.Call(ctx, "s1", "bash", json.RawMessage(`{"command":"sleep 1; exit 7","description":"end soon","run_in_background":true}`))
	if err != nil || res.IsError {
		t.Fatalf("background task through %s: %v %+v", names[0], err, res)
	}
	bg, ok := res.Value.(*tools.Background)
	if !ok {
		t.Fatalf("not a background result: %q", res.Text)
	}
	id := bg.TaskID
	start := time.Now()
	var e eventstream.Event
	for {
		if e, err = stream.Next(); err != nil {
			t.Fatalf("%s's stream: %v", names[1], err)
		}
		if e.Type == eventstream.EventNotice {
			break
		}
	}
	t.Logf("%s's stream heard the end of a task started through %s %s after it was started", names[1], names[0], time.Since(start).Round(time.Millisecond))
	if e.Session != "s1" || e.Notice.TaskID != id || e.Notice.Text != "background task "+id+" completed, exit code: 7" {
		t.Fatalf("event %+v, want the notice of %s", e, id)
	}
	res, err = b.Call(ctx, "s1", "bash", json.RawMessage(`{"command":"true","description":"next call, on B"}`))
	if err != nil || len(res.Notices) != 1 || res.Notices[0].TaskID != id {
		t.Fatalf("B's next result: %v %+v, want %s's notice", err, res, id)
	}

	evs, err := c.CS.CoreV1().Events(r.SessionsNamespace).List(ctx, metav1.ListOptions{LabelSelector: "org.shellbox.event=notice"})
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, ev := range evs.Items {
		found = found || (ev.Reason == "TaskEnded" && ev.Message == e.Notice.Text && ev.InvolvedObject.Kind == "Pod")
	}
	if !found {
		t.Fatalf("no TaskEnded Event for %s in %s: %d notice events", id, r.SessionsNamespace, len(evs.Items))
	}
}
