package apiserver_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/shellbox/shellbox/agent/apiserver"
	"github.com/shellbox/shellbox/agentapi"
	"github.com/shellbox/shellbox/executor"
)

// collect is a Spec.Live that keeps what it saw.
type collect struct {
	mu      sync.Mutex
	out     bytes.Buffer
	skipped int64
}

func (c *collect) live(ch executor.Chunk) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out.Write(ch.Data)
	c.skipped += ch.Skipped
}

// TestRunStreamedRoundTrip: a run with Live returns the same Result as one
// without, and Live saw the output (every byte, or a count of what it
// missed).
func TestRunStreamedRoundTrip(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	for _, cmd := range []string{"echo out; echo err >&2; exit 3", "head -c 3000000 /dev/zero | tr '\\0' x", "kill -KILL $$"} {
		spec := a.spec(t, executor.Request{Command: cmd})
		plain, err1 := a.client.Run(context.Background(), spec)
		var c collect
		spec.Live = c.live
		streamed, err2 := a.client.Run(context.Background(), spec)
		if err1 != nil || err2 != nil {
			t.Fatalf("%s: plain %v, streamed %v", cmd, err1, err2)
		}
		if (plain.SpillPath == "") != (streamed.SpillPath == "") {
			t.Errorf("%s: spill path: plain %q, streamed %q", cmd, plain.SpillPath, streamed.SpillPath)
		}
		plain.SpillPath, streamed.SpillPath = "", ""
		if plain != streamed {
			t.Errorf("%s:\nplain    %+v\nstreamed %+v", cmd, plain, streamed)
		}
		total := int64(len(plain.Stdout) + len(plain.Stderr))
		if plain.Truncated {
			total = plain.SpillBytes
		}
		if got := int64(c.out.Len()) + c.skipped; got != total {
			t.Errorf("%s: live saw %d bytes and skipped %d: %d, want %d", cmd, c.out.Len(), c.skipped, got, total)
		}
	}
}

// TestRunStreamedWire: the streamed answer as bytes on the wire: ndjson
// output frames, then the result frame; an invalid spec is an error frame
// of its class.
func TestRunStreamedWire(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (netConn, error) {
		return dialUnix(ctx, a.socket)
	}}}
	post := func(spec executor.Spec) (*http.Response, []agentapi.Frame) {
		b, _ := json.Marshal(spec)
		req, _ := http.NewRequest(http.MethodPost, "http://agent/v1/run", bytes.NewReader(b))
		req.Header.Set(agentapi.HeaderProtocol, "1")
		req.Header.Set("Accept", "application/json;q=0.5, "+agentapi.ContentTypeStream)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var frames []agentapi.Frame
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			var f agentapi.Frame
			if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
				t.Fatalf("frame %q: %v", sc.Text(), err)
			}
			frames = append(frames, f)
		}
		return resp, frames
	}
	resp, frames := post(a.spec(t, executor.Request{Command: "echo hello"}))
	if ct := resp.Header.Get("Content-Type"); ct != agentapi.ContentTypeStream {
		t.Fatalf("Content-Type %q", ct)
	}
	if len(frames) != 2 || frames[0].Output == nil || string(frames[0].Output.Data) != "hello\n" || frames[0].Output.Stream != executor.Stdout ||
		frames[1].Result == nil || frames[1].Result.Stdout != "hello\n" {
		t.Fatalf("frames %+v", frames)
	}
	bad := a.spec(t, executor.Request{Command: "true"})
	bad.Workdir = "relative"
	_, frames = post(bad)
	if len(frames) != 1 || frames[0].Error == nil || frames[0].Error.Class != agentapi.ClassInvalid ||
		!strings.Contains(frames[0].Error.Message, "workdir must be a clean absolute path") {
		t.Fatalf("invalid spec: frames %+v", frames)
	}
}

// TestRunStreamedOldAgent: an agent that predates streaming ignores the
// Accept header and answers the plain Result: the client returns it, with
// no live output, and the call works as before.
func TestRunStreamedOldAgent(t *testing.T) {
	t.Parallel()
	a := newTestAgent(t)
	srv, err := apiserver.NewServer(apiserver.ServerConfig{Runner: a.exec, Agent: "old", Root: a.root, Home: a.root})
	if err != nil {
		t.Fatal(err)
	}
	sock := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Accept")
		srv.ServeHTTP(w, r)
	}))
	c, err := agentapi.Dial(context.Background(), sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	spec := a.spec(t, executor.Request{Command: "echo hi; exit 2"})
	var col collect
	spec.Live = col.live
	res, err := c.Run(context.Background(), spec)
	if err != nil || res.Stdout != "hi\n" || res.ExitCode != 2 {
		t.Fatalf("Run = %+v, %v", res, err)
	}
	if col.out.Len() != 0 {
		t.Errorf("live output from an agent that cannot stream: %q", col.out.String())
	}
}
