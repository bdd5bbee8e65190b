package sandboxconn

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/sandboxed"
	"github.com/shellbox/shellbox/sandbox"
)

// Agent is a connection to a sandbox's agent, as the executor uses it.
type Agent = sandboxed.Agent

// Dialer connects to the agent of a running sandbox. ctx bounds the dial.
type Dialer func(ctx context.Context, sb sandbox.Sandbox) (Agent, error)

// DialAgent dials the agent of sb (agentapi protocol, with its
// version handshake).
func DialAgent(ctx context.Context, sb sandbox.Sandbox) (Agent, error) {
	if sb.Agent.Network == "" {
		return nil, fmt.Errorf("sandbox %s has no agent endpoint", sb.ID)
	}
	return agentapi.DialEndpoint(ctx, sb.Agent)
}

// Busy is a sandbox.Config.Busy hook: the agent's own account of what runs
// in sb (agentapi.Activity), so a session busy with a background task, a
// long call or an egress connection is never reaped, whichever process
// serves it.
func Busy(ctx context.Context, sb sandbox.Sandbox) (string, error) {
	if sb.Agent.Network == "" {
		return "", fmt.Errorf("sandbox %s has no agent endpoint", sb.ID)
	}
	c, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		return "", err
	}
	defer c.Close()
	a, err := c.Activity(ctx)
	if err != nil {
		return "", fmt.Errorf("activity of sandbox %s: %w", sb.ID, err)
	}
	return a.Busy(), nil
}

// WaitAgent is a sandbox.Config.Ready hook: it returns once a new sandbox's
// agent answers its handshake, or at once when the agent speaks another
// protocol version.
func WaitAgent(ctx context.Context, sb sandbox.Sandbox) error {
	c, err := waitAgent(ctx, sb)
	if err != nil {
		return err
	}
	return c.Close()
}

// waitAgent is WaitAgent returning the connection.
func waitAgent(ctx context.Context, sb sandbox.Sandbox) (*agentapi.Client, error) {
	var last error
	for delay := time.Millisecond; ; delay = min(2*delay, 50*time.Millisecond) {
		c, err := agentapi.DialEndpoint(ctx, sb.Agent)
		if err == nil {
			return c, nil
		}
		last = err
		var mismatch *agentapi.VersionError
		if errors.As(err, &mismatch) {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("agent of sandbox %s did not answer: %w (last: %v)", sb.ID, ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}

// WarmUp prepares a pooled sandbox (sandbox.Config.Prepare): it runs
// `true` through the agent once, as a session's first call would, so that
// call finds the shell's files in the page cache (on fuse-overlayfs
// storage a container's first process start costs tens of milliseconds
// more than its next). ctx bounds it.
func WarmUp(ctx context.Context, sb sandbox.Sandbox) error {
	c, err := agentapi.DialEndpoint(ctx, sb.Agent)
	if err != nil {
		return fmt.Errorf("warming sandbox %s up: %w", sb.ID, err)
	}
	return warmUp(ctx, sb, c)
}

// warmUp is WarmUp on the connection c, which it closes.
func warmUp(ctx context.Context, sb sandbox.Sandbox, c *agentapi.Client) error {
	defer c.Close()
	spec, err := executor.DefaultLimits().Resolve(ctx, executor.Request{Session: sb.Session, Shell: executor.Bash, Command: "true"},
		"/workspace", []string{"PATH=" + sandboxed.DefaultPath, "HOME=/workspace", "LANG=C.UTF-8"})
	if err != nil {
		return fmt.Errorf("warming sandbox %s up: %w", sb.ID, err)
	}
	res, err := c.Run(ctx, spec)
	if err != nil {
		return fmt.Errorf("warming sandbox %s up: %w", sb.ID, err)
	}
	if res.ExitCode != 0 || res.Signal != "" {
		return fmt.Errorf("warming sandbox %s up: `true` ended with exit code %d, signal %q", sb.ID, res.ExitCode, res.Signal)
	}
	return nil
}
