package server

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/shellbox/shellbox/errdefs"
)

// apiError is the body of every non-2xx answer.
type apiError struct {
	Error errorBody `json:"error"`
}

type errorBody struct {
	// Code is stable and machine-readable, e.g. "unauthorized",
	// "body_too_large", "rate_limited", "no_such_session".
	Code    string `json:"code"`
	Message string `json:"message"`
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError writes a JSON error.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, apiError{errorBody{Code: code, Message: msg}})
}

// writeErr maps a seam error to its status: the one place errors become HTTP
// (statusOf maps the classes of errdefs, and the server's ErrNoSuchSession).
func writeErr(w http.ResponseWriter, err error) {
	status, code := statusOf(err)
	writeError(w, status, code, err.Error())
}

func statusOf(err error) (int, string) {
	switch {
	case errors.Is(err, ErrNoSuchSession):
		return http.StatusNotFound, "no_such_session"
	case errors.Is(err, errdefs.ErrNoSuchApproval):
		return http.StatusNotFound, "no_such_approval"
	case errors.Is(err, errdefs.ErrNotAllowed):
		return http.StatusForbidden, "not_allowed"
	case errors.Is(err, errdefs.ErrInvalid):
		return http.StatusBadRequest, "invalid"
	case errors.Is(err, errdefs.ErrNotFound):
		return http.StatusNotFound, "not_found"
	case errors.Is(err, errdefs.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, "too_large"
	case errors.Is(err, errdefs.ErrNoSpace):
		return http.StatusInsufficientStorage, "no_space"
	case errors.Is(err, errdefs.ErrConflict):
		return http.StatusConflict, "conflict"
	case errors.Is(err, errdefs.ErrUnavailable):
		return http.StatusServiceUnavailable, "unavailable"
	default:
		return http.StatusInternalServerError, "internal"
	}
}
