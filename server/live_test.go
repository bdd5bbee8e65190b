package server

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestLiveKeepalive: a streamed call whose command is silent gets keepalive
// comments (the first one starts the stream), then its output and result.
// The command waits for a file the test creates once it read a keepalive,
// so no timing is assumed.
func TestLiveKeepalive(t *testing.T) {
	r := newRig(t, nil)
	r.srv.liveKeepalive = 10 * time.Millisecond
	args, _ := json.Marshal(map[string]any{"command": "until [ -e ka.flag ]; do sleep 0.02; done; rm ka.flag; echo out", "description": "wait then print"})
	req, _ := http.NewRequest(http.MethodPost, r.ts.URL+"/v1/sessions/ka/tools/bash?stream=1", strings.NewReader(string(args)))
	req.Header.Set("Authorization", "Bearer "+tokenAcme)
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	line, err := br.ReadString('\n')
	if err != nil || line != ": keepalive\n" {
		t.Fatalf("first line %q, %v", line, err)
	}
	touch, _ := json.Marshal(map[string]any{"command": "touch ka.flag", "description": "release the call"})
	if code, b := r.do(http.MethodPost, "/v1/sessions/ka/tools/bash", tokenAcme, "application/json", touch); code != http.StatusOK {
		t.Fatalf("release: %d %s", code, b)
	}
	var events []string
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			break
		}
		if strings.HasPrefix(line, "event: ") {
			events = append(events, strings.TrimSpace(line[len("event: "):]))
		}
	}
	if len(events) != 2 || events[0] != "output" || events[1] != "result" {
		t.Fatalf("events %v, want output then result", events)
	}
}
