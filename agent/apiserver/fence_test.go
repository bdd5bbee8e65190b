package apiserver_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/executor/local"
)

// TestFenceAndExit: a fenced server (a pod in its termination grace)
// refuses new runs and tasks as ClassTerminating, which the client reports
// as not sent (the call goes to the session's next sandbox), and serves
// the rest; POST /v1/exit answers, then calls Exit.
func TestFenceAndExit(t *testing.T) {
	root := t.TempDir()
	e, err := local.New(local.Config{Root: root, Home: root, SpillDir: t.TempDir(), Limits: testLimits()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	exited := make(chan struct{})
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: e, Agent: "test", Root: root, Home: root,
		Exit: func() { close(exited) }})
	if err != nil {
		t.Fatal(err)
	}
	sock := serve(t, srv)
	ctx := context.Background()
	c, err := agentapi.Dial(ctx, sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec, err := e.Resolve(ctx, executor.Request{Session: session, Command: "echo hi"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := c.Run(ctx, spec); err != nil || res.Stdout != "hi\n" {
		t.Fatalf("before the fence: %+v, %v", res, err)
	}
	srv.Fence()
	_, err = c.Run(ctx, spec)
	if !errors.Is(err, agentapi.ErrNotSent) || !errors.Is(err, executor.ErrUnavailable) {
		t.Errorf("run once fenced: %v, want ErrNotSent and ErrUnavailable", err)
	}
	bg := spec
	bg.Background, bg.Timeout = true, 0
	if _, err := c.Start(ctx, bg); !errors.Is(err, agentapi.ErrNotSent) {
		t.Errorf("start once fenced: %v, want ErrNotSent", err)
	}
	if _, err := c.Activity(ctx); err != nil {
		t.Errorf("activity once fenced: %v", err)
	}
	if err := agentapi.ExitEndpoint(ctx, agentapi.Endpoint{Network: "unix", Address: sock}); err != nil {
		t.Fatalf("exit: %v", err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("Exit not called")
	}
}
