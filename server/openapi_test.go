package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
	"github.com/shellbox/shellbox/tools"
	"github.com/shellbox/shellbox/usage"
)

// TestOpenAPI: the checked-in document is served and names every route the
// handler registers, and only those.
func TestOpenAPI(t *testing.T) {
	r := newRig(t, nil)
	code, b := r.do("GET", "/openapi.json", "", "", nil)
	var doc struct {
		OpenAPI string                    `json:"openapi"`
		Paths   map[string]map[string]any `json:"paths"`
	}
	if code != 200 || json.Unmarshal(b, &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("%d %.200s", code, b)
	}
	var got []string
	for p, ops := range doc.Paths {
		for m := range ops {
			if m != "parameters" {
				got = append(got, m+" "+p)
			}
		}
	}
	var want []string
	for _, route := range r.srv.routes() {
		method, path, _ := strings.Cut(route.pattern, " ")
		want = append(want, strings.ToLower(method)+" "+path)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("OpenAPI paths:\n%v\nroutes:\n%v", got, want)
	}
}

// openAPISchemas returns the properties of openapi.json's schemas, by name.
func openAPISchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]any `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(OpenAPI, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]map[string]any{}
	for name, sc := range doc.Components.Schemas {
		out[name] = sc.Properties
	}
	return out
}

// TestOpenAPIUsageFields: the usage schemas name every field GET /v1/usage
// answers (usage.Figures's, and a record's own).
func TestOpenAPIUsageFields(t *testing.T) {
	schemas := openAPISchemas(t)
	b, err := json.Marshal(usage.Record{Figures: usage.Figures{WorkspaceMeasured: time.Unix(1, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	for _, schema := range []string{"UsageFigures", "UsageRecord"} {
		props := schemas[schema]
		for k := range rec {
			if _, ok := props[k]; !ok && (schema == "UsageRecord" || !slices.Contains([]string{"tenant", "session", "from", "to", "final"}, k)) {
				t.Errorf("%s: no property %q, which /v1/usage answers", schema, k)
			}
		}
	}
}

// TestOpenAPINoticeFields: the Notice and Status schemas name every field
// a completion notice carries (in a tool result's notices, and in events).
func TestOpenAPINoticeFields(t *testing.T) {
	schemas := openAPISchemas(t)
	b, err := json.Marshal(tools.Notice{TaskID: "t", Text: "x", SpillBytes: 1,
		Status: executor.Status{State: executor.Killed, ExitCode: -1, Signal: "SIGKILL"}})
	if err != nil {
		t.Fatal(err)
	}
	var n map[string]any
	if err := json.Unmarshal(b, &n); err != nil {
		t.Fatal(err)
	}
	for k, v := range n {
		if _, ok := schemas["Notice"][k]; !ok {
			t.Errorf("Notice: no property %q", k)
		}
		if st, ok := v.(map[string]any); ok && k == "status" {
			for k := range st {
				if _, ok := schemas["Status"][k]; !ok {
					t.Errorf("Status: no property %q", k)
				}
			}
		}
	}
}
