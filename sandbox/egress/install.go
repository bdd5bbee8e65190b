package egress

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/shellbox/shellbox/agentapi/egresswire"
)

// installRequest is the POST that installs cfg.CA in the agent's bundle.
func installRequest(cfg RelayConfig) string {
	var b strings.Builder
	b.WriteString("POST /v1/egress HTTP/1.1\r\nHost: agent\r\n")
	for _, k := range slices.Sorted(maps.Keys(cfg.PollHeader)) {
		if v := cfg.PollHeader[k]; k != "" && !strings.ContainsAny(k, "\r\n\x00: ") && !strings.ContainsAny(v, "\r\n\x00") {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	if cfg.Agent.Token != "" && !strings.ContainsAny(cfg.Agent.Token, "\r\n\x00") {
		b.WriteString("Authorization: Bearer " + cfg.Agent.Token + "\r\n")
	}
	b.WriteString(egresswire.CAHeader + ": " + base64.StdEncoding.EncodeToString(cfg.CA) + "\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
	return b.String()
}

// installCA installs cfg.CA in the agent, retrying with backoff while the
// agent cannot be reached (a sandbox starting) until ctx ends; an answer
// other than 204 is final (an agent from before CA installs: 400 or 501).
func (r *Relay) installCA(ctx context.Context) error {
	backoff := 50 * time.Millisecond
	for {
		err := r.installOnce(ctx)
		if err == nil {
			return nil
		}
		if _, final := err.(installRefused); final || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("egress CA: %w", ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, 2*time.Second)
	}
}

type installRefused struct{ msg string }

func (e installRefused) Error() string { return e.msg }

func (r *Relay) installOnce(ctx context.Context) error {
	ac, err := r.dialAgent(ctx)
	if err != nil {
		return fmt.Errorf("egress CA: agent unreachable: %w", err)
	}
	defer r.drop(ac.Conn)
	ac.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(ac, installRequest(r.cfg)); err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	ac.lr.N = maxPollHead
	resp, err := http.ReadResponse(ac.br, nil)
	if err != nil {
		return fmt.Errorf("egress CA: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusNoContent {
		return nil
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
	return installRefused{fmt.Sprintf("egress CA: the agent answered %s: %s", resp.Status, egresswire.OneLine(strings.TrimSpace(string(msg))))}
}
