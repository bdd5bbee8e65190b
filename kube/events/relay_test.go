package events

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
)

func notice(tenant, session, task string) eventstream.Event {
	st := executor.Status{State: executor.Completed, ExitCode: 2}
	return eventstream.Event{Type: eventstream.EventNotice, Tenant: tenant, Session: session, Time: time.Now().UTC(),
		Notice: &tools.Notice{TaskID: task, Status: st, Text: tools.RenderNotice(task, st)}}
}

// replica is a started Relay and what its subscriber heard.
type replica struct {
	*Relay
	heard chan eventstream.Event
}

func startReplica(t *testing.T, cs kubernetes.Interface, ns, release, instance string) *replica {
	t.Helper()
	r, err := New(cs, Config{Namespace: ns, Release: release, Instance: instance})
	if err != nil {
		t.Fatal(err)
	}
	rep := &replica{Relay: r, heard: make(chan eventstream.Event, 64)}
	cancel := r.Subscribe(func(e eventstream.Event) { rep.heard <- e })
	if err := r.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); r.Close() })
	return rep
}

func (r *replica) next(t *testing.T, within time.Duration) eventstream.Event {
	t.Helper()
	select {
	case e := <-r.heard:
		return e
	case <-time.After(within):
		t.Fatalf("%s heard nothing in %s", r.cfg.Instance, within)
		return eventstream.Event{}
	}
}

func (r *replica) quiet(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case e := <-r.heard:
		t.Fatalf("%s heard %+v", r.cfg.Instance, e)
	case <-time.After(d):
	}
}

// waitWatches waits until n watches are open on the fake (its watch does
// not resume from a resourceVersion: what is created before it is missed).
func waitWatches(t *testing.T, cs *fake.Clientset, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		got := 0
		for _, a := range cs.Actions() {
			if a.GetVerb() == "watch" {
				got++
			}
		}
		if got >= n {
			return
		}
	}
	t.Fatalf("fewer than %d watches opened", n)
}

// TestRelay: a notice one replica publishes reaches the other replicas of
// its release, not itself and not another release's; the object says what
// an operator needs.
func TestRelay(t *testing.T) {
	cs := fake.NewClientset()
	a := startReplica(t, cs, "sessions", "rel", "a")
	b := startReplica(t, cs, "sessions", "rel", "b")
	other := startReplica(t, cs, "sessions", "other", "c")
	waitWatches(t, cs, 3)

	want := notice("acme", "s-1", "bg_1")
	a.Publish(want)
	got := b.next(t, 10*time.Second)
	if got.Tenant != "acme" || got.Session != "s-1" || *got.Notice != *want.Notice {
		t.Fatalf("b heard %+v, want %+v", got, want)
	}
	a.quiet(t, 200*time.Millisecond)
	other.quiet(t, 0)

	list, err := cs.CoreV1().Events("sessions").List(context.Background(), metav1.ListOptions{LabelSelector: "org.shellbox.event=notice"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("events: %v %v", list, err)
	}
	ev := list.Items[0]
	if ev.Reason != ReasonTaskEnded || ev.Message != want.Notice.Text || ev.ReportingInstance != "a" ||
		ev.ReportingController != Controller || ev.InvolvedObject.Kind != "Pod" || ev.InvolvedObject.Namespace != "sessions" ||
		ev.Labels["org.shellbox.release"] != "rel" || ev.Type != corev1.EventTypeNormal {
		t.Fatalf("event object: %+v", ev)
	}

	// A reported end travels too, as its own reason.
	rep := eventstream.Event{Type: eventstream.EventReported, Tenant: "acme", Session: "s-1", Notice: &tools.Notice{TaskID: "bg_1"}}
	b.Publish(rep)
	if got := a.next(t, 10*time.Second); got.Type != eventstream.EventReported || got.Notice.TaskID != "bg_1" || got.Session != "s-1" {
		t.Fatalf("a heard %+v, want the reported end of bg_1", got)
	}

	// Approvals and other types are not relayed.
	a.Publish(eventstream.Event{Type: eventstream.EventApproval, Tenant: "acme", Session: "s-1"})
	b.quiet(t, 200*time.Millisecond)
}

// TestRelayIgnoresForgeries: events of this release's label that are not
// well-formed notices of the server controller are not announced.
func TestRelayIgnoresForgeries(t *testing.T) {
	cs := fake.NewClientset()
	b := startReplica(t, cs, "sessions", "rel", "b")
	waitWatches(t, cs, 1)
	a, _ := New(cs, Config{Namespace: "sessions", Release: "rel", Instance: "a"})
	good, err := a.object(notice("acme", "s", "bg_9"))
	if err != nil {
		t.Fatal(err)
	}
	for i, mut := range []func(*corev1.Event){
		func(e *corev1.Event) { e.ReportingController = "someone/else" },
		func(e *corev1.Event) { e.Reason = "Pulled" },
		func(e *corev1.Event) { e.Annotations[AnnotationEvent] = "{not json" },
		func(e *corev1.Event) {
			e.Annotations[AnnotationEvent] = `{"type":"notice","tenant":"acme","session":"s"}`
		},
		func(e *corev1.Event) {
			e.Annotations[AnnotationEvent] = `{"type":"approval","tenant":"acme","session":"s","notice":{"taskId":"x"}}`
		},
		func(e *corev1.Event) { delete(e.Annotations, AnnotationEvent) },
	} {
		e := good.DeepCopy()
		e.Name = fmt.Sprintf("forged-%d", i)
		mut(e)
		if _, err := cs.CoreV1().Events("sessions").Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b.quiet(t, 300*time.Millisecond)
	if _, err := cs.CoreV1().Events("sessions").Create(context.Background(), good, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := b.next(t, 10*time.Second); got.Notice.TaskID != "bg_9" {
		t.Fatalf("heard %+v", got)
	}
}

// TestRelayQueueBounded: Publish never blocks; past the queue it drops.
func TestRelayQueueBounded(t *testing.T) {
	cs := fake.NewClientset()
	r, err := New(cs, Config{Namespace: "sessions", Queue: 4})
	if err != nil {
		t.Fatal(err)
	}
	// Not started: nothing drains the queue.
	done := make(chan struct{})
	go func() {
		for i := range 1000 {
			r.Publish(notice("acme", "s", fmt.Sprintf("bg_%d", i)))
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Publish blocked")
	}
	if len(r.queue) != 4 || r.dropped != 996 {
		t.Fatalf("queued %d, dropped %d", len(r.queue), r.dropped)
	}
}

// TestRelayHandoverFlushed: a handover published just before Close is
// written (Close flushes the queue) and heard by the other replica.
func TestRelayHandoverFlushed(t *testing.T) {
	cs := fake.NewClientset()
	b := startReplica(t, cs, "sessions", "rel", "b")
	a, err := New(cs, Config{Namespace: "sessions", Release: "rel", Instance: "a"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitWatches(t, cs, 2)
	for i := range 20 {
		a.Publish(eventstream.Event{Type: eventstream.EventHandover, Tenant: "acme", Session: fmt.Sprintf("s-%d", i)})
	}
	a.Close()
	list, err := cs.CoreV1().Events("sessions").List(context.Background(), metav1.ListOptions{LabelSelector: "org.shellbox.event=handover"})
	if err != nil || len(list.Items) != 20 {
		t.Fatalf("%d handover events after Close, want 20: %v", len(list.Items), err)
	}
	for i := range 20 {
		if got := b.next(t, 10*time.Second); got.Type != eventstream.EventHandover || got.Tenant != "acme" || got.Session == "" {
			t.Fatalf("b heard %+v (#%d), want a handover", got, i)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	cs := fake.NewClientset()
	for _, c := range []Config{{}, {Namespace: "Bad_NS"}, {Namespace: "ok", Instance: string(make([]byte, 129))}} {
		if _, err := New(cs, c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

// TestRelayExpires: a replica deletes the Events it wrote once they are
// Keep old, not sooner, after the other replica heard them; the release's
// Events older than twice Keep are deleted whoever wrote them (a replica
// gone); another release's are left alone.
func TestRelayExpires(t *testing.T) {
	cs := fake.NewClientset()
	var mu sync.Mutex
	deleted := map[string]time.Time{}
	cs.PrependReactor("delete", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		deleted[a.(k8stesting.DeleteAction).GetName()] = time.Now()
		mu.Unlock()
		return false, nil, nil
	})
	gone := func(name string) (time.Time, bool) {
		mu.Lock()
		defer mu.Unlock()
		at, ok := deleted[name]
		return at, ok
	}
	// Labelled as the relay's, not well-formed notices (never announced).
	foreign := func(name, release string, age time.Duration) {
		t.Helper()
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "sessions",
			Labels:            map[string]string{"org.shellbox.release": release, LabelEvent: eventstream.EventNotice},
			CreationTimestamp: metav1.NewTime(time.Now().Add(-age))}}
		if _, err := cs.CoreV1().Events("sessions").Create(context.Background(), e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	const keep = 2 * time.Second
	foreign("orphan", "rel", time.Hour)      // a replica gone an hour ago
	foreign("young", "rel", 0)               // another replica's, just written
	foreign("elsewhere", "other", time.Hour) // another release's

	b := startReplica(t, cs, "sessions", "rel", "b")
	a, err := New(cs, Config{Namespace: "sessions", Release: "rel", Instance: "a", Keep: keep})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	waitWatches(t, cs, 2)

	published := time.Now()
	for i := range 3 {
		a.Publish(notice("acme", "s-1", fmt.Sprintf("bg_%d", i)))
	}
	for i := range 3 {
		if got := b.next(t, 10*time.Second); got.Notice.TaskID != fmt.Sprintf("bg_%d", i) {
			t.Fatalf("b heard %+v, want bg_%d", got, i)
		}
	}
	// The writer notes an Event once its create returned (b may hear it
	// first).
	var own []string
	for deadline := time.Now().Add(10 * time.Second); len(own) != 3; time.Sleep(5 * time.Millisecond) {
		a.mu.Lock()
		own = own[:0]
		for _, w := range a.written {
			own = append(own, w.name)
		}
		a.mu.Unlock()
		if len(own) != 3 && time.Now().After(deadline) {
			t.Fatalf("a remembers %d events written, want 3", len(own))
		}
	}

	for _, name := range append(own, "orphan", "young") {
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			if _, ok := gone(name); ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("event %s not deleted 20s on", name)
			}
		}
	}
	for _, name := range own {
		if at, _ := gone(name); at.Sub(published) < keep {
			t.Errorf("event %s deleted %s after it was published, before Keep (%s)", name, at.Sub(published), keep)
		}
	}
	if _, ok := gone("elsewhere"); ok {
		t.Error("another release's event was deleted")
	}
	list, err := cs.CoreV1().Events("sessions").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "elsewhere" {
		t.Fatalf("events left: %+v %v, want only another release's", list, err)
	}
	a.mu.Lock()
	left := len(a.written)
	a.mu.Unlock()
	if left != 0 {
		t.Errorf("a still remembers %d written events", left)
	}
}
