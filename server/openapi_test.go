package server

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
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
