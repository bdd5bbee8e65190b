package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"
)

// maxArgsBytes bounds the raw arguments of one call. A command longer than
// this is not a shell command a model should send.
const maxArgsBytes = 1 << 20

// shellArgs are validated bash/pwsh arguments.
type shellArgs struct {
	Command       string
	Description   string
	Timeout       time.Duration // 0: the executor's default
	Workdir       string
	Background    bool
	Permissions   []string
	Justification string
}

// argError is a validation failure; its text is the model-facing message.
type argError struct{ msg string }

func (e *argError) Error() string { return e.msg }

func argErrorf(format string, a ...any) error { return &argError{fmt.Sprintf(format, a...)} }

// fields decodes the top level of args into raw members. An empty body is an
// empty object: every tool then reports its first missing argument.
func fields(args json.RawMessage) (map[string]json.RawMessage, error) {
	if len(args) > maxArgsBytes {
		return nil, argErrorf("invalid arguments: %d bytes is over the limit of %d", len(args), maxArgsBytes)
	}
	trimmed := bytes.TrimSpace(args)
	if len(trimmed) == 0 {
		return map[string]json.RawMessage{}, nil
	}
	if trimmed[0] != '{' {
		if !json.Valid(trimmed) {
			return nil, argErrorf("invalid arguments: malformed JSON: %s", jsonSyntaxDetail(trimmed))
		}
		return nil, argErrorf("invalid arguments: expected a JSON object, got %s", clip(string(trimmed)))
	}
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(&m); err != nil {
		return nil, argErrorf("invalid arguments: malformed JSON: %s", jsonSyntaxDetail(trimmed))
	}
	if dec.More() {
		return nil, argErrorf("invalid arguments: malformed JSON: unexpected data after the object")
	}
	if m == nil {
		m = map[string]json.RawMessage{}
	}
	return m, nil
}

func jsonSyntaxDetail(b []byte) string {
	var v any
	err := json.Unmarshal(b, &v)
	var se *json.SyntaxError
	switch {
	case err == nil:
		return "not a JSON object"
	case asSyntax(err, &se):
		return fmt.Sprintf("%s (at byte %d)", strings.TrimPrefix(se.Error(), "json: "), se.Offset)
	default:
		return strings.TrimPrefix(err.Error(), "json: ")
	}
}

func asSyntax(err error, se **json.SyntaxError) bool {
	s, ok := err.(*json.SyntaxError)
	if ok {
		*se = s
	}
	return ok
}

// clip shortens a raw value for an error message.
func clip(s string) string {
	const max = 80
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// absent reports a member that is missing or JSON null: optional arguments
// may be sent as null (OpenAI strict mode does).
func absent(raw json.RawMessage, ok bool) bool {
	return !ok || bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func requiredString(m map[string]json.RawMessage, name string) (string, error) {
	raw, ok := m[name]
	var s string
	if !ok || json.Unmarshal(raw, &s) != nil || strings.TrimSpace(s) == "" {
		return "", argErrorf("invalid %s: expected a non-empty string", name)
	}
	return s, nil
}

// noNUL rejects a string argument holding a NUL byte: no command, path or
// text that reaches a shell, a policy or the audit log can carry one (argv
// and paths end at the first NUL, so what was checked would not be what
// runs). It is validation, before any policy sees the call.
func noNUL(name, s string) error {
	if strings.IndexByte(s, 0) >= 0 {
		return argErrorf("invalid %s: contains a NUL byte", name)
	}
	return nil
}

func optionalString(m map[string]json.RawMessage, name string) (string, error) {
	raw, ok := m[name]
	if absent(raw, ok) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", argErrorf("invalid %s: expected a string, got %s", name, clip(string(raw)))
	}
	return s, nil
}

func optionalBool(m map[string]json.RawMessage, name string) (bool, error) {
	raw, ok := m[name]
	if absent(raw, ok) {
		return false, nil
	}
	var b bool
	if err := json.Unmarshal(raw, &b); err != nil {
		return false, argErrorf("invalid %s: expected a boolean, got %s", name, clip(string(raw)))
	}
	return b, nil
}

func timeoutArg(m map[string]json.RawMessage) (time.Duration, error) {
	raw, ok := m["timeoutMs"]
	if absent(raw, ok) {
		return 0, nil
	}
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil || !(f > 0) || math.IsInf(f, 0) {
		return 0, argErrorf("invalid timeoutMs: expected a positive number, got %s", clip(string(raw)))
	}
	// Anything beyond a century is the executor's cap anyway; avoid overflow.
	if f > float64(100*365*24*time.Hour/time.Millisecond) {
		return math.MaxInt64, nil
	}
	d := time.Duration(math.Ceil(f * float64(time.Millisecond)))
	if d <= 0 {
		d = time.Millisecond
	}
	return d, nil
}

func permissionsArg(m map[string]json.RawMessage) ([]string, error) {
	raw, ok := m["sandbox_permissions"]
	if absent(raw, ok) {
		return nil, nil
	}
	var ps []string
	if err := json.Unmarshal(raw, &ps); err != nil {
		return nil, argErrorf("invalid sandbox_permissions: expected an array of strings, got %s", clip(string(raw)))
	}
	for _, p := range ps {
		if strings.TrimSpace(p) == "" {
			return nil, argErrorf("invalid sandbox_permissions: expected non-empty strings")
		}
	}
	return ps, nil
}

// unknownFields rejects members the tool does not take, naming the first in
// sorted order so the message is stable.
func unknownFields(m map[string]json.RawMessage, known ...string) error {
	var extra []string
	for k := range m {
		found := false
		for _, n := range known {
			if k == n {
				found = true
				break
			}
		}
		if !found {
			extra = append(extra, k)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	sort.Strings(extra)
	return argErrorf("invalid arguments: unknown argument %q", extra[0])
}

// parseShellArgs validates bash (sandbox=true) or pwsh (sandbox=false)
// arguments, in the order the contract lists them, so the first failing
// argument is the one reported.
func parseShellArgs(args json.RawMessage, sandbox, background bool) (shellArgs, error) {
	var a shellArgs
	m, err := fields(args)
	if err != nil {
		return a, err
	}
	known := []string{"command", "description", "timeoutMs", "workdir", "run_in_background"}
	if sandbox {
		known = append(known, "sandbox_permissions", "justification")
	}
	if err := unknownFields(m, known...); err != nil {
		return a, err
	}
	if a.Command, err = requiredString(m, "command"); err != nil {
		return a, err
	}
	if err := noNUL("command", a.Command); err != nil {
		return a, err
	}
	if a.Description, err = requiredString(m, "description"); err != nil {
		return a, err
	}
	if err := noNUL("description", a.Description); err != nil {
		return a, err
	}
	if a.Timeout, err = timeoutArg(m); err != nil {
		return a, err
	}
	if a.Workdir, err = optionalString(m, "workdir"); err != nil {
		return a, err
	}
	if err := noNUL("workdir", a.Workdir); err != nil {
		return a, err
	}
	if a.Background, err = optionalBool(m, "run_in_background"); err != nil {
		return a, err
	}
	if a.Background && !background {
		return a, argErrorf("run_in_background is disabled for this deployment (enableRunInBackground: false)")
	}
	if !sandbox {
		return a, nil
	}
	if a.Permissions, err = permissionsArg(m); err != nil {
		return a, err
	}
	for _, p := range a.Permissions {
		if err := noNUL("sandbox_permissions", p); err != nil {
			return a, err
		}
	}
	if a.Justification, err = optionalString(m, "justification"); err != nil {
		return a, err
	}
	if err := noNUL("justification", a.Justification); err != nil {
		return a, err
	}
	if len(a.Permissions) > 0 && strings.TrimSpace(a.Justification) == "" {
		return a, argErrorf("invalid justification: expected a non-empty string with sandbox_permissions")
	}
	return a, nil
}

func parseTaskID(args json.RawMessage) (string, error) {
	m, err := fields(args)
	if err != nil {
		return "", err
	}
	if err := unknownFields(m, "task_id"); err != nil {
		return "", err
	}
	return requiredString(m, "task_id")
}
