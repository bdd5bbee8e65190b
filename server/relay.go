package server

import (
	"time"

	"github.com/shellbox/shellbox/eventstream"
	"github.com/shellbox/shellbox/tools"
)

// NoticeReceiver is an optional ability of a Backend: a completion notice
// another replica saw (through the eventstream.EventRelay) queued for the session's
// next tool result here, as a notice of its own would be. The Backend
// drops it when it has queued or reported that task's end itself.
type NoticeReceiver interface {
	ReceiveNotice(tenant, session string, n tools.Notice)
	// ForgetNotice drops the notice of a task whose end another replica
	// reported to the model (pending here, or still to come).
	ForgetNotice(tenant, session, taskID string)
	// WatchTasks watches the session's running background tasks (in the
	// background; it must not block): a replica that watched them is
	// shutting down.
	WatchTasks(tenant, session string)
}

// maxRecentNotices bounds the notices a server remembers to drop a second
// copy of (its own watcher and another replica's may both see a task end).
const maxRecentNotices = 4096

func noticeKey(tenant, session, task string) string {
	return tenant + "\x00" + session + "\x00" + task
}

// notice delivers a completion notice to this process's streams once, and,
// when it is this process's own (not relayed), to the other replicas.
func (s *Server) notice(tenant, session string, n tools.Notice, relayed bool) {
	if n.TaskID == "" {
		return
	}
	if !s.recent.Add(noticeKey(tenant, session, n.TaskID)) {
		if !relayed {
			// Another replica's copy came first: this one still meters
			// the task's spill, if it started the task (taskBook).
			s.book.ended(tenant, session, n, false)
		}
		return
	}
	s.metrics.taskDone(tenant, n.TaskID)
	s.book.ended(tenant, session, n, relayed)
	e := eventstream.Event{Type: eventstream.EventNotice, Tenant: tenant, Session: session, Notice: &n, Time: time.Now().UTC()}
	s.events.publish(e)
	if relayed {
		if nr, ok := s.cfg.Backend.(NoticeReceiver); ok {
			nr.ReceiveNotice(tenant, session, n)
		}
		return
	}
	if s.cfg.Relay != nil {
		s.cfg.Relay.Publish(e)
	}
}

// Reported relays that a task's end was reported to the model here, so
// the other replicas drop their copy of its notice. It never blocks: it is
// meant for tools.Config.OnReported.
func (s *Server) Reported(tenant, session, taskID string) {
	if s.cfg.Relay != nil && taskID != "" {
		s.cfg.Relay.Publish(eventstream.Event{Type: eventstream.EventReported, Tenant: tenant, Session: session,
			Notice: &tools.Notice{TaskID: taskID}, Time: time.Now().UTC()})
	}
}

// SessionChanged publishes a session's change of state (suspended,
// resumed, not restored, deleted) to its event streams and, through the
// Relay, the other replicas'. It never blocks.
func (s *Server) SessionChanged(tenant, session, state, message string) {
	e := eventstream.Event{Type: eventstream.EventSession, Tenant: tenant, Session: session, State: state,
		Message: message, Time: time.Now().UTC()}
	s.events.publish(e)
	if s.cfg.Relay != nil {
		s.cfg.Relay.Publish(e)
	}
}

// HandOver tells the other replicas that this process, shutting down,
// watched background tasks of the session. It never blocks.
func (s *Server) HandOver(tenant, session string) {
	if s.cfg.Relay != nil {
		s.cfg.Relay.Publish(eventstream.Event{Type: eventstream.EventHandover, Tenant: tenant, Session: session, Time: time.Now().UTC()})
	}
}

// onRelayed takes an event another replica published: a completion notice
// of a tenant this server serves goes to its streams and, for the next
// tool result, to the backend; a reported end makes the backend drop its
// copy of that notice; a handover makes it watch the session's tasks; a
// session's change of state goes to its streams; anything else is ignored.
func (s *Server) onRelayed(e eventstream.Event) {
	if e.Session == "" || (e.Type != eventstream.EventHandover && e.Type != eventstream.EventSession && (e.Notice == nil || e.Notice.TaskID == "")) {
		return
	}
	if _, ok := s.limits[e.Tenant]; !ok && len(s.limits) > 0 {
		return
	}
	switch e.Type {
	case eventstream.EventHandover:
		if nr, ok := s.cfg.Backend.(NoticeReceiver); ok {
			nr.WatchTasks(e.Tenant, e.Session)
		}
	case eventstream.EventNotice:
		s.notice(e.Tenant, e.Session, *e.Notice, true)
	case eventstream.EventSession:
		s.events.publish(e)
	case eventstream.EventReported:
		if nr, ok := s.cfg.Backend.(NoticeReceiver); ok {
			nr.ForgetNotice(e.Tenant, e.Session, e.Notice.TaskID)
		}
	}
}
