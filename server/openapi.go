package server

import (
	_ "embed"
	"net/http"
)

// OpenAPI is the REST API's OpenAPI 3.1 document, checked in as
// server/openapi.json and served at /openapi.json.
//
//go:embed openapi.json
var OpenAPI []byte

func serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Write(OpenAPI)
}
