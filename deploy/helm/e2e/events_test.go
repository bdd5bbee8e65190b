package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/shellbox/shellbox/sandbox/kube/kubetest"
	"github.com/shellbox/shellbox/server"
	"github.com/shellbox/shellbox/server/client"
	"github.com/shellbox/shellbox/tools"
)

// replicaURLs are the release's ready server pods' own URLs
// (http://<pod IP>:<port>, not the Service), by pod name, waiting up to a
// minute for n of them.
func replicaURLs(t *testing.T, r *Release, n int) map[string]string {
	t.Helper()
	ctx := context.Background()
	var last string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		pods, err := r.c.CS.CoreV1().Pods(r.Namespace).List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=server,app.kubernetes.io/instance=" + r.Name})
		if err != nil {
			t.Fatal(err)
		}
		urls := map[string]string{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp != nil || p.Status.PodIP == "" || !podReady(&p) {
				continue
			}
			urls[p.Name] = fmt.Sprintf("http://%s:%d", p.Status.PodIP, p.Spec.Containers[0].Ports[0].ContainerPort)
		}
		if len(urls) == n {
			return urls
		}
		last = fmt.Sprintf("%d ready server pods of %d", len(urls), len(pods.Items))
	}
	r.Diagnose(t)
	t.Fatalf("want %d ready server pods: %s", n, last)
	return nil
}

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
	urls := replicaURLs(t, r, 2)
	names := make([]string, 0, 2)
	for name := range urls {
		names = append(names, name)
	}
	slices.Sort(names)
	a := client.New(urls[names[0]], r.Tokens["acme"], nil)
	b := client.New(urls[names[1]], r.Tokens["acme"], nil)
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
	var e server.Event
	for {
		if e, err = stream.Next(); err != nil {
			t.Fatalf("%s's stream: %v", names[1], err)
		}
		if e.Type == server.EventNotice {
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
