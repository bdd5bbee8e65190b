// Package events is the eventstream.EventRelay of server replicas on
// Kubernetes: a background task's completion notice seen by one replica
// (the one watching the task) reaches every replica's event streams (SSE
// and MCP) and the session's next tool result on any replica.
//
// # The object
//
// A relayed event is a core/v1 Event in the sessions namespace
// (Config.Namespace), so an operator sees task ends where the session pods
// are (kubectl get events, kubectl describe pod):
//
//   - name "shellbox-" and 16 random hex digits; labels
//     org.shellbox.release (the release's replicas hear only their own),
//     org.shellbox.event (notice, or reported) and
//     app.kubernetes.io/managed-by=shellbox;
//   - involvedObject: the session's pod by its usual name
//     (kube.PodName; a claimed pooled pod keeps its pooled name, so the
//     reference names a pod that may not exist: the annotation is what
//     counts);
//   - reason TaskEnded, type Normal, message the notice's text (for the
//     word that a task's end was reported to the model on one replica, so
//     the others drop their pending copy of its notice: reason
//     TaskReported),
//     reportingController shellbox.dev/server, reportingInstance the
//     publishing process (Config.Instance);
//   - the annotation org.shellbox.event: the eventstream.Event as JSON (exact
//     type, tenant, session, task id, status and text).
//
// # How long they stay
//
// Each replica deletes the Events it wrote once they are Config.Keep old
// (DefaultKeep, 5 minutes), checked every Keep/10; and lists the
// release's Events at Start and every Keep after, deleting any older than
// twice Keep (those of replicas gone: killed, rolled away). The API
// server's --event-ttl (one hour by default) would keep them an hour: ten
// Events a second from 8 busy sessions are ~36,000 in etcd; at 5 minutes
// ~3,300. An Event is only needed until every replica's watch has
// delivered it: within a second while the watch runs; a replica whose
// watch broke opens a new one within its backoff (5 s at most) once the
// API server answers, from the last resourceVersion or, when that was
// compacted away, by a relist that announces what it missed. Five minutes
// covers a replica that could not reach the API server, while the others
// could write, for up to that long: 5 to 10 times an API server restart
// (30-60 s on the CI's cluster), and an operator's `kubectl get events`
// still shows the last minutes of task ends. A replica cut off for longer
// misses notices older than that; the task's end is still read with
// bash_output (the same as for a notice the writer could not write).
//
// # Who does what
//
//   - Publish (the replica whose watcher saw the end) queues the event
//     without blocking (Config.Queue at most; past that it is dropped and
//     logged) and one writer creates the objects, each request bounded by
//     Config.RequestTimeout; a failed create is logged and dropped.
//   - Every replica watches the release's Events (label selector) from
//     the resourceVersion of a list made at Start: events already there are
//     never announced. A watch that ends is resumed from the last
//     resourceVersion seen (bookmarks keep it fresh); one that is too old
//     (410 Gone) is replaced by a list whose events created since Start and
//     not announced yet are announced, then a new watch. Subscribers are
//     called from the watch, in order, with the events of other instances
//     only (reportingInstance differs), and only with well-formed notices
//     of the right controller and release.
//   - A replica shutting down publishes, for each session whose tasks it
//     watched, a handover (reason TasksHandedOver): the others watch the
//     session's running tasks from then on. Close writes what is still
//     queued (FlushTimeout at most) before it stops.
//   - Copies (two replicas watching one task, a relist) are dropped by the
//     server, which keeps the recent notices' keys; the relay also skips
//     an object name it has announced (the newest 4,096).
//
// RBAC in Config.Namespace: events create, list, watch, delete.
package events

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/kube"
	"github.com/shellbox/shellbox/tools"
)

// The Event object's fixed parts.
const (
	LabelEvent      = "org.shellbox.event"
	AnnotationEvent = "org.shellbox.event"
	// Controller is the reportingController of relayed events.
	Controller = "shellbox.dev/server"
	// ReasonTaskEnded is the reason of a completion notice;
	// ReasonTaskReported of the word that a task's end was reported to the
	// model (eventstream.EventReported: the other replicas drop their notice).
	ReasonTaskEnded    = "TaskEnded"
	ReasonTaskReported = "TaskReported"
	// ReasonTasksHandedOver: a replica shutting down watched the session's
	// background tasks (eventstream.EventHandover); the others watch them.
	ReasonTasksHandedOver = "TasksHandedOver"
)

// reasons are the relayed event types' reasons.
var reasons = map[string]string{
	eventstream.EventNotice: ReasonTaskEnded, eventstream.EventReported: ReasonTaskReported, eventstream.EventHandover: ReasonTasksHandedOver,
}

// wellFormed reports whether e is an event the relay carries.
func wellFormed(e eventstream.Event) bool {
	if reasons[e.Type] == "" || e.Tenant == "" || e.Session == "" {
		return false
	}
	return e.Type == eventstream.EventHandover || (e.Notice != nil && e.Notice.TaskID != "")
}

// Defaults of Config.
const (
	DefaultQueue          = 256
	DefaultRequestTimeout = 10 * time.Second
	// FlushTimeout bounds how long Close writes what is still queued.
	FlushTimeout = 3 * time.Second
	// maxAnnotated bounds the JSON of one event read back.
	maxAnnotated = 16 << 10
	// maxMessage bounds an Event's message (the notice's text).
	maxMessage = 1024
	// announcedNames is how many object names the relay remembers.
	announcedNames = 4096
	// DefaultKeep is how long a relayed Event is kept (the package doc
	// says why that is enough).
	DefaultKeep = 5 * time.Minute
	// maxWritten bounds the Events a writer remembers to delete; past it
	// the oldest is left to the sweep (at twice Keep) or the API server's
	// TTL.
	maxWritten = 16384
)

// Config configures a Relay.
type Config struct {
	// Namespace holds the Events: the sessions namespace, where the
	// server's Role is. Required.
	Namespace string
	// Release names the installation: its replicas hear each other (label
	// org.shellbox.release). Default kube.DefaultRelease.
	Release string
	// Instance names this process among the replicas
	// (reportingInstance); its own events are not announced to it.
	// Default kube.DefaultIdentity() (the pod's name, a random suffix).
	Instance string
	// Queue bounds the events waiting to be written. Default DefaultQueue.
	Queue int
	// RequestTimeout bounds each request to the API server. Default
	// DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Keep is how long the Events this replica writes are kept; the
	// release's Events older than twice Keep are deleted by any replica.
	// Default DefaultKeep.
	Keep time.Duration
	// Logger hears failed writes and watches (default: discard).
	Logger *slog.Logger
}

// Relay is the EventRelay of a release's replicas. New, then Start; Close
// stops its watch and writer.
type Relay struct {
	cfg      Config
	release  string // the release's label value
	cs       kubernetes.Interface
	selector string
	queue    chan eventstream.Event
	log      *slog.Logger

	started time.Time
	cancel  context.CancelFunc // stops the watch (the writer, once flushed)
	flush   chan struct{}      // closed by Close
	closing sync.Once
	wg      sync.WaitGroup

	mu   sync.Mutex
	subs map[*func(eventstream.Event)]struct{}
	// announced are the names of the newest events announced.
	announced *tools.RecentKeys
	// dropped counts events Publish could not queue since the last log.
	dropped int
	// written are the Events this replica wrote, oldest first, to delete
	// once Keep old (at most maxWritten).
	written []written
}

// written is an Event this replica wrote, and when.
type written struct {
	name string
	at   time.Time
}

var _ eventstream.EventRelay = (*Relay)(nil)

// New returns a Relay on cs. It does not contact the API server.
func New(cs kubernetes.Interface, cfg Config) (*Relay, error) {
	if cfg.Namespace == "" || len(validation.IsDNS1123Label(cfg.Namespace)) > 0 {
		return nil, fmt.Errorf("kubeevents: namespace %q: must be a DNS-1123 label", cfg.Namespace)
	}
	if cfg.Release == "" {
		cfg.Release = kube.DefaultRelease
	}
	if cfg.Instance == "" {
		cfg.Instance = kube.DefaultIdentity()
	}
	if len(cfg.Instance) > 128 {
		return nil, fmt.Errorf("kubeevents: instance %q: longer than 128 bytes", cfg.Instance)
	}
	if cfg.Queue <= 0 {
		cfg.Queue = DefaultQueue
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = DefaultRequestTimeout
	}
	if cfg.Keep <= 0 {
		cfg.Keep = DefaultKeep
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	release := kube.LabelValue(cfg.Release)
	sel, err := labels.Parse(fmt.Sprintf("%s=%s,%s in (%s,%s,%s)", kube.LabelRelease, release, LabelEvent,
		eventstream.EventNotice, eventstream.EventReported, eventstream.EventHandover))
	if err != nil {
		return nil, fmt.Errorf("kubeevents: release %q: %w", cfg.Release, err)
	}
	return &Relay{
		cfg: cfg, release: release, flush: make(chan struct{}), cs: cs, selector: sel.String(), queue: make(chan eventstream.Event, cfg.Queue),
		log:  cfg.Logger.With("relay", cfg.Namespace, "instance", cfg.Instance),
		subs: map[*func(eventstream.Event)]struct{}{}, announced: tools.NewRecentKeys(announcedNames),
	}, nil
}

// Start lists the release's Events (to learn where the watch begins: what
// is there already is never announced) and starts the watch and the
// writer, which run until Close. It fails when the list does.
func (r *Relay) Start(ctx context.Context) error {
	lctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	list, err := r.cs.CoreV1().Events(r.cfg.Namespace).List(lctx, metav1.ListOptions{LabelSelector: r.selector, Limit: 1})
	if err != nil {
		return fmt.Errorf("kubeevents: list events in %s: %w", r.cfg.Namespace, err)
	}
	r.started = time.Now()
	life, stop := context.WithCancel(context.Background())
	r.cancel = stop
	r.wg.Go(func() { r.watch(life, list.ResourceVersion) })
	r.wg.Go(func() { r.write(life) })
	r.wg.Go(func() { r.expire(life) })
	return nil
}

// Close stops the watch and the writer. Events still queued are written
// first for at most FlushTimeout (a replica shutting down hands its tasks
// over that way); what is left then is dropped.
func (r *Relay) Close() {
	if r.cancel == nil {
		return
	}
	r.closing.Do(func() { close(r.flush) })
	r.wg.Wait()
}

// Publish queues e for the other replicas. Only completion notices,
// reported ends and handovers are relayed; it never blocks.
func (r *Relay) Publish(e eventstream.Event) {
	if !wellFormed(e) {
		return
	}
	select {
	case r.queue <- e:
	default:
		r.mu.Lock()
		r.dropped++
		n := r.dropped
		r.mu.Unlock()
		if n == 1 || n%100 == 0 {
			r.log.Warn("event relay queue full: notices not relayed", "dropped", n)
		}
	}
}

// Subscribe calls fn with every notice another replica published, until
// cancel.
func (r *Relay) Subscribe(fn func(eventstream.Event)) (cancel func()) {
	p := &fn
	r.mu.Lock()
	r.subs[p] = struct{}{}
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		delete(r.subs, p)
		r.mu.Unlock()
	}
}

// write creates an Event object for each queued event until Close, then
// what is still queued, for at most FlushTimeout, and stops the watch.
func (r *Relay) write(ctx context.Context) {
	defer r.cancel()
	for {
		select {
		case <-r.flush:
			fctx, cancel := context.WithTimeout(ctx, FlushTimeout)
			defer cancel()
			for {
				select {
				case e := <-r.queue:
					r.create(fctx, e)
				default:
					return
				}
			}
		case e := <-r.queue:
			r.create(ctx, e)
		}
	}
}

// create writes e's Event object, logging a failure.
func (r *Relay) create(ctx context.Context, e eventstream.Event) {
	obj, err := r.object(e)
	if err == nil {
		wctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
		_, err = r.cs.CoreV1().Events(r.cfg.Namespace).Create(wctx, obj, metav1.CreateOptions{})
		cancel()
	}
	if err != nil {
		r.log.Warn("relaying an event", "type", e.Type, "tenant", e.Tenant, "session", e.Session, "err", err)
		return
	}
	r.mu.Lock()
	if len(r.written) == maxWritten {
		r.written = r.written[1:]
	}
	r.written = append(r.written, written{obj.Name, time.Now()})
	r.mu.Unlock()
}

// expire deletes, until ctx ends, the Events this replica wrote once they
// are Keep old (looked at every Keep/10), and every Keep (the first time
// at once) the release's Events older than twice Keep, whoever wrote them.
func (r *Relay) expire(ctx context.Context) {
	tick := time.NewTicker(max(r.cfg.Keep/10, 10*time.Millisecond))
	defer tick.Stop()
	var swept time.Time
	for {
		if time.Since(swept) >= r.cfg.Keep {
			swept = time.Now()
			if err := r.sweep(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("sweeping old relayed events", "err", err)
			}
		}
		r.deleteOwn(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// deleteOwn deletes the Events this replica wrote that are Keep old.
func (r *Relay) deleteOwn(ctx context.Context) {
	cutoff := time.Now().Add(-r.cfg.Keep)
	r.mu.Lock()
	n := 0
	for n < len(r.written) && r.written[n].at.Before(cutoff) {
		n++
	}
	old := slices.Clone(r.written[:n])
	r.written = slices.Delete(r.written, 0, n)
	r.mu.Unlock()
	failed := 0
	var last error
	for _, w := range old {
		if err := r.delete(ctx, w.name); err != nil {
			failed++
			last = err
		}
	}
	if failed > 0 && ctx.Err() == nil {
		r.log.Warn("deleting relayed events", "failed", failed, "of", len(old), "err", last)
	}
}

// sweep deletes the release's Events older than twice Keep.
func (r *Relay) sweep(ctx context.Context) error {
	cutoff := time.Now().Add(-2 * r.cfg.Keep)
	opts := metav1.ListOptions{LabelSelector: r.selector, Limit: 500}
	var old []string
	for {
		lctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
		list, err := r.cs.CoreV1().Events(r.cfg.Namespace).List(lctx, opts)
		cancel()
		if err != nil {
			return fmt.Errorf("list events in %s: %w", r.cfg.Namespace, err)
		}
		for _, e := range list.Items {
			if !e.CreationTimestamp.IsZero() && e.CreationTimestamp.Time.Before(cutoff) {
				old = append(old, e.Name)
			}
		}
		if list.Continue == "" {
			break
		}
		opts.Continue = list.Continue
	}
	var errs []error
	for _, name := range old {
		if err := r.delete(ctx, name); err != nil && len(errs) < 3 {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// delete deletes the Event name (one already gone is no error).
func (r *Relay) delete(ctx context.Context, name string) error {
	dctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
	defer cancel()
	err := r.cs.CoreV1().Events(r.cfg.Namespace).Delete(dctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete event %s: %w", name, err)
	}
	return nil
}

// object is the Event object relaying e.
func (r *Relay) object(e eventstream.Event) (*corev1.Event, error) {
	body, err := json.Marshal(e)
	if err != nil {
		return nil, err
	}
	if len(body) > maxAnnotated {
		return nil, fmt.Errorf("event of %d bytes: over %d", len(body), maxAnnotated)
	}
	var msg string
	switch e.Type {
	case eventstream.EventNotice:
		msg = e.Notice.Text
	case eventstream.EventReported:
		msg = "the end of background task " + e.Notice.TaskID + " was reported to the model"
	case eventstream.EventHandover:
		msg = "server " + r.cfg.Instance + " shut down: the other replicas watch the session's background tasks"
	}
	if len(msg) > maxMessage {
		msg = msg[:maxMessage]
		for !utf8.ValidString(msg) {
			msg = msg[:len(msg)-1]
		}
	}
	b := make([]byte, 8)
	rand.Read(b)
	now := metav1.NewTime(e.Time)
	if e.Time.IsZero() {
		now = metav1.Now()
	}
	return &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:      "shellbox-" + hex.EncodeToString(b),
			Namespace: r.cfg.Namespace,
			Labels: map[string]string{
				kube.LabelRelease: r.release, LabelEvent: e.Type, kube.LabelManagedBy: "shellbox",
			},
			Annotations: map[string]string{AnnotationEvent: string(body)},
		},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: "v1", Kind: "Pod", Namespace: r.cfg.Namespace, Name: kube.PodName(e.Tenant, e.Session),
		},
		Reason: reasons[e.Type], Message: msg, Type: corev1.EventTypeNormal,
		Source:         corev1.EventSource{Component: "shellbox"},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: Controller, ReportingInstance: r.cfg.Instance,
	}, nil
}

// watch follows the release's Events from resourceVersion rv until ctx
// ends, announcing other instances' notices.
func (r *Relay) watch(ctx context.Context, rv string) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if rv == "" {
			var err error
			if rv, err = r.relist(ctx); err != nil {
				r.log.Warn("relisting relayed events", "err", err)
				sleep(ctx, &backoff)
				continue
			}
		}
		w, err := r.cs.CoreV1().Events(r.cfg.Namespace).Watch(ctx, metav1.ListOptions{
			LabelSelector: r.selector, ResourceVersion: rv, AllowWatchBookmarks: true,
		})
		if err != nil {
			if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
				rv = ""
			} else if ctx.Err() == nil {
				r.log.Warn("watching relayed events", "err", err)
			}
			sleep(ctx, &backoff)
			continue
		}
		var healthy bool
		rv, healthy = r.consume(ctx, w, rv)
		if healthy {
			backoff = 100 * time.Millisecond
		} else {
			sleep(ctx, &backoff)
		}
	}
}

// consume reads w until it ends and returns the resourceVersion to resume
// from ("" to relist) and whether it delivered anything.
func (r *Relay) consume(ctx context.Context, w watch.Interface, rv string) (string, bool) {
	defer w.Stop()
	healthy := false
	for {
		select {
		case <-ctx.Done():
			return rv, healthy
		case ev, ok := <-w.ResultChan():
			if !ok {
				return rv, healthy
			}
			switch ev.Type {
			case watch.Error:
				err := apierrors.FromObject(ev.Object)
				if apierrors.IsGone(err) || apierrors.IsResourceExpired(err) {
					return "", healthy
				}
				r.log.Warn("watching relayed events", "err", err)
				return rv, healthy
			case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark:
				obj, ok := ev.Object.(*corev1.Event)
				if !ok {
					continue
				}
				healthy = true
				if obj.ResourceVersion != "" {
					rv = obj.ResourceVersion
				}
				if ev.Type == watch.Added {
					r.announce(obj)
				}
			}
		}
	}
}

// relist lists the release's Events, announces those created since Start
// that were not announced, and returns the list's resourceVersion.
func (r *Relay) relist(ctx context.Context) (string, error) {
	opts := metav1.ListOptions{LabelSelector: r.selector, Limit: 500}
	for {
		lctx, cancel := context.WithTimeout(ctx, r.cfg.RequestTimeout)
		list, err := r.cs.CoreV1().Events(r.cfg.Namespace).List(lctx, opts)
		cancel()
		if err != nil {
			return "", err
		}
		for i := range list.Items {
			if !list.Items[i].CreationTimestamp.Time.Before(r.started.Add(-time.Second)) {
				r.announce(&list.Items[i])
			}
		}
		if list.Continue == "" {
			return list.ResourceVersion, nil
		}
		opts.Continue = list.Continue
	}
}

// announce calls the subscribers with obj's event if it is another
// instance's well-formed notice of this release not announced before.
func (r *Relay) announce(obj *corev1.Event) {
	e, err := r.parse(obj)
	if err != nil {
		if !errors.Is(err, errOwn) {
			r.log.Debug("ignoring an event", "event", obj.Name, "err", err)
		}
		return
	}
	r.mu.Lock()
	if !r.announced.Add(obj.Name) {
		r.mu.Unlock()
		return
	}
	subs := make([]*func(eventstream.Event), 0, len(r.subs))
	for fn := range r.subs {
		subs = append(subs, fn)
	}
	r.mu.Unlock()
	for _, fn := range subs {
		(*fn)(e)
	}
}

var errOwn = errors.New("published by this instance")

// parse is obj's relayed event, checked.
func (r *Relay) parse(obj *corev1.Event) (eventstream.Event, error) {
	if obj.ReportingInstance == r.cfg.Instance {
		return eventstream.Event{}, errOwn
	}
	if obj.Labels[kube.LabelRelease] != r.release || obj.ReportingController != Controller {
		return eventstream.Event{}, errors.New("not a relayed event of this release")
	}
	body := obj.Annotations[AnnotationEvent]
	if body == "" || len(body) > maxAnnotated {
		return eventstream.Event{}, fmt.Errorf("annotation %s: missing or over %d bytes", AnnotationEvent, maxAnnotated)
	}
	var e eventstream.Event
	if err := json.Unmarshal([]byte(body), &e); err != nil {
		return eventstream.Event{}, fmt.Errorf("annotation %s: %w", AnnotationEvent, err)
	}
	if !wellFormed(e) || reasons[e.Type] != obj.Reason {
		return eventstream.Event{}, fmt.Errorf("annotation %s: not a notice (or reported end) of a tenant's session", AnnotationEvent)
	}
	return e, nil
}

// sleep waits *d (or until ctx ends) and doubles it, up to 5 s.
func sleep(ctx context.Context, d *time.Duration) {
	t := time.NewTimer(*d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	*d = min(*d*2, 5*time.Second)
}
