package agentapi

import (
	"errors"
	"net/http"
	"testing"

	"github.com/shellbox/shellbox/executor"
)

// TestErrorClasses: every class survives the wire with its text, and an
// error without a class stays one.
func TestErrorClasses(t *testing.T) {
	for _, tt := range []struct {
		err    error
		class  string
		status int
	}{
		{executor.Errorf(executor.ErrInvalid, "invalid workdir: x is not a directory"), ClassInvalid, http.StatusBadRequest},
		{executor.NoSuchTask("abc"), ClassNotFound, http.StatusNotFound},
		{executor.Aborted(), ClassAborted, StatusClientClosed},
		{executor.Errorf(executor.ErrLimit, "too many tasks: 8"), ClassLimit, http.StatusTooManyRequests},
		{executor.Errorf(executor.ErrUnavailable, "executor is closed"), ClassUnavailable, http.StatusServiceUnavailable},
		{errors.New("something else"), ClassInternal, http.StatusInternalServerError},
	} {
		e, status := EncodeError(tt.err)
		if e.Class != tt.class || status != tt.status || e.Message != tt.err.Error() {
			t.Errorf("EncodeError(%v) = %+v %d, want class %s status %d", tt.err, e, status, tt.class, tt.status)
		}
		back := decodeError(e)
		if back.Error() != tt.err.Error() {
			t.Errorf("decoded text %q, want %q", back, tt.err)
		}
		for _, c := range classes {
			if errors.Is(back, c.err) != errors.Is(tt.err, c.err) {
				t.Errorf("%v: errors.Is(%v) differs after the round trip", tt.err, c.err)
			}
		}
	}
}
