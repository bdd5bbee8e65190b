package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/shellbox/shellbox/config"
)

// backendUsage is the --backend flag's help.
const backendUsage = "where commands run: docker or containerd (a hardened container per session), kube (a pod per session), " +
	"local (host processes, unsandboxed: only when named), or auto (docker if its engine answers, else containerd, else refuse)"

// probeTimeout bounds each engine's answer to the probe of backend auto:
// an engine that has not answered a ping by then counts as absent. A
// local engine answers in milliseconds; a socket nobody serves fails at
// once.
const probeTimeout = 2 * time.Second

// backendChoice is how chooseBackend chose: for the command's first log
// line (how) and the debug line of what probing cost (probes).
type backendChoice struct {
	// how is "configured", or "auto: the <backend> engine answered", with
	// what the engines before it said.
	how string
	// probes are the engines pinged, in order: none when configured.
	probes []probed
}

// probed is one engine's answer to the probe of backend auto.
type probed struct {
	backend string
	took    time.Duration
	err     error // nil: it answered
}

// chooseBackend makes cfg.Backend concrete before a command builds
// anything on it. A configured backend (flag, file, SHELLBOX_BACKEND) is
// kept as it is, unprobed; backend auto becomes the first of
// config.AutoBackends whose engine answers a ping within probeTimeout,
// each engine found as its backend finds it (DOCKER_HOST...,
// containerd.address). With none answering it is an error saying how to
// get one, and that --backend local runs commands unsandboxed. The choice
// (also on error: the probes made) is for the command's log, logBackend.
// A command calls it once: every session of the process then runs on
// that backend.
func chooseBackend(ctx context.Context, cfg *config.Config) (backendChoice, error) {
	if cfg.Backend != config.BackendAuto {
		return backendChoice{how: "configured"}, nil
	}
	var (
		c      backendChoice
		failed []error
	)
	for _, name := range config.AutoBackends {
		start := time.Now()
		err := probe(ctx, *cfg, name)
		c.probes = append(c.probes, probed{backend: name, took: time.Since(start), err: err})
		if err == nil {
			cfg.Backend = name
			c.how = fmt.Sprintf("auto: the %s engine answered", name)
			if len(failed) > 0 {
				c.how += " (" + joinErrors(failed) + ")"
			}
			return c, nil
		}
		if ctx.Err() != nil {
			return c, fmt.Errorf("choosing a backend: %w", ctx.Err())
		}
		failed = append(failed, fmt.Errorf("%s: %w", name, err))
	}
	return c, noEngineError(failed)
}

// probe pings the engine of backend name with cfg's settings for it.
func probe(ctx context.Context, cfg config.Config, name string) error {
	cfg.Backend = name
	// The probe only pings: no agent, no sandbox, nothing written.
	rt, err := openRuntime(cfg, "", nil)
	if err != nil {
		return err
	}
	defer rt.Close()
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	if err := rt.Ping(ctx); err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return fmt.Errorf("no answer within %s: %w", probeTimeout, err)
		}
		return err
	}
	return nil
}

// noEngineError is the refusal of backend auto with no engine answering.
// `shellbox mcp` started by a harness shows it to someone who may never
// have read shellbox's configuration: it says what was tried and each way
// out. It wraps each engine's error.
func noEngineError(failed []error) error {
	verbs := make([]string, len(failed))
	args := make([]any, 0, len(failed)+1)
	for i, err := range failed {
		verbs[i] = "%w"
		args = append(args, err)
	}
	return fmt.Errorf("no backend configured, and no sandbox engine answers ("+strings.Join(verbs, "; ")+"). "+
		"Start Docker (or point DOCKER_HOST at an engine) or containerd (its socket: containerd.address, "+
		"SHELLBOX_CONTAINERD_ADDRESS), or name a backend with --backend, SHELLBOX_BACKEND "+
		"or `backend:` in shellbox.yaml: docker, containerd or kube. "+
		"--backend local runs commands unsandboxed on this host, as %s", append(args, whoami())...)
}

// joinErrors is the errors' texts on one line.
func joinErrors(errs []error) string {
	texts := make([]string, len(errs))
	for i, err := range errs {
		texts[i] = err.Error()
	}
	return strings.Join(texts, "; ")
}

// whoami names this process's user: the one local runs commands as.
func whoami() string {
	uid := os.Getuid()
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// logBackend writes the backend a serving command runs on, and how it was
// chosen: first, so that whoever reads the log (a harness's stderr) learns
// it before anything else. The local backend's line is a warning. Then, at
// debug level, what probing for it cost (logProbes).
func logBackend(log *slog.Logger, backend string, c backendChoice) {
	if backend == "local" {
		log.Warn("backend local: commands run unsandboxed on this host, as "+whoami()+
			"; docker, containerd or kube run them in a sandbox per session",
			"backend", backend, "chosen", c.how)
	} else {
		log.Info("backend "+backend, "backend", backend, "chosen", c.how)
	}
	logProbes(log, c)
}

// logProbes writes, at debug level, what the probes of backend auto cost:
// their total time and each engine's answer and time ("docker": "answered
// in 512µs", "containerd": "failed in 1.1ms: ..."). Nothing when the
// backend was configured (no probe).
func logProbes(log *slog.Logger, c backendChoice) {
	if len(c.probes) == 0 {
		return
	}
	var total time.Duration
	attrs := make([]any, 0, len(c.probes)+1)
	for _, p := range c.probes {
		total += p.took
		answer := "answered in " + p.took.String()
		if p.err != nil {
			answer = fmt.Sprintf("failed in %s: %v", p.took, p.err)
		}
		attrs = append(attrs, slog.String(p.backend, answer))
	}
	log.Debug("backend probe", append([]any{slog.String("took", total.String())}, attrs...)...)
}
