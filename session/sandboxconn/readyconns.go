package sandboxconn

import (
	"context"
	"sync"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/sandbox"
)

// ReadyConns keeps the connection a new sandbox's readiness check made
// (Ready, the Manager's Config.Ready) for the executor's first dial of that
// sandbox (Dial, an executor's Config.Dial), so the agent is dialled once
// instead of closed and dialled again a moment later. On Kubernetes
// each dial is a TCP connection to the pod and a handshake, on the path of
// every new session's first call.
//
// A connection is handed over only to a dial of the same sandbox and
// endpoint (ID, address and token alike), within handoffFresh; one nobody
// takes (a pooled sandbox checked at creation, claimed minutes later or by
// another replica) is closed when it goes stale. At most maxHandoffs wait;
// past that, the oldest is closed. An agent that dies between the check and
// the first call fails that call (a transport error, ErrUnavailable) rather
// than the dial, which would have replaced the sandbox; the next call does.
type ReadyConns struct {
	mu   sync.Mutex
	kept map[string]handed // by sandbox ID
}

type handed struct {
	c  *agentapi.Client
	ep agentapi.Endpoint
	at time.Time
}

// handoffFresh is how long a kept connection waits for its dial;
// maxHandoffs bounds how many wait.
const (
	handoffFresh = 10 * time.Second
	maxHandoffs  = 64
)

// NewReadyConns returns an empty ReadyConns.
func NewReadyConns() *ReadyConns { return &ReadyConns{kept: map[string]handed{}} }

// Ready is WaitAgent keeping the connection for Dial.
func (h *ReadyConns) Ready(ctx context.Context, sb sandbox.Sandbox) error {
	c, err := waitAgent(ctx, sb)
	if err != nil {
		return err
	}
	h.put(sb, c)
	return nil
}

// Dial is DialAgent, taking the connection Ready kept for sb if there is
// one.
func (h *ReadyConns) Dial(ctx context.Context, sb sandbox.Sandbox) (Agent, error) {
	if c := h.take(sb); c != nil {
		return c, nil
	}
	return DialAgent(ctx, sb)
}

// WarmUp is the package's WarmUp (a pool's Prepare, right after Ready) on
// the connection Ready kept for sb, if there is one.
func (h *ReadyConns) WarmUp(ctx context.Context, sb sandbox.Sandbox) error {
	if c := h.take(sb); c != nil {
		return warmUp(ctx, sb, c)
	}
	return WarmUp(ctx, sb)
}

func (h *ReadyConns) put(sb sandbox.Sandbox, c *agentapi.Client) {
	now := time.Now()
	var closing []*agentapi.Client
	h.mu.Lock()
	if old, ok := h.kept[sb.ID]; ok {
		closing = append(closing, old.c)
	}
	h.kept[sb.ID] = handed{c: c, ep: sb.Agent, at: now}
	oldest := ""
	for id, k := range h.kept {
		if now.Sub(k.at) >= handoffFresh {
			closing = append(closing, k.c)
			delete(h.kept, id)
		} else if oldest == "" || k.at.Before(h.kept[oldest].at) {
			oldest = id
		}
	}
	if len(h.kept) > maxHandoffs {
		closing = append(closing, h.kept[oldest].c)
		delete(h.kept, oldest)
	}
	h.mu.Unlock()
	for _, c := range closing {
		c.Close()
	}
}

// take returns and forgets the connection kept for sb, nil if there is
// none fresh for its endpoint.
func (h *ReadyConns) take(sb sandbox.Sandbox) *agentapi.Client {
	h.mu.Lock()
	k, ok := h.kept[sb.ID]
	delete(h.kept, sb.ID)
	h.mu.Unlock()
	if !ok {
		return nil
	}
	if k.ep != sb.Agent || time.Since(k.at) >= handoffFresh {
		k.c.Close()
		return nil
	}
	return k.c
}
