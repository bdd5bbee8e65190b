package sandboxtest_test

import (
	"errors"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
	"github.com/shellbox/shellbox/sandbox/sandboxtest"
)

func TestFakeConformance(t *testing.T) {
	fakeConformance(t, sandboxtest.NewFake(), nil)
}

// The fake that records uses passes the same suite, RecordUse included.
func TestRecordingConformance(t *testing.T) {
	r := sandboxtest.NewRecording()
	fakeConformance(t, r.Fake, r)
}

// fakeConformance runs the suite on f, handed out as rt if set.
func fakeConformance(t *testing.T, f *sandboxtest.Fake, rt sandbox.Runtime) {
	if rt == nil {
		rt = f
	}
	sandboxtest.Run(t, sandboxtest.Harness{
		New:    func(*testing.T) sandbox.Runtime { return rt },
		Tenant: "fake",
		Spec: func(t *testing.T, tenant, session, owner string) sandbox.Spec {
			s, err := sandbox.NewSpec(tenant, session, sandbox.WithImage("img"))
			if err != nil {
				t.Fatal(err)
			}
			s.Owner = owner
			return s
		},
		Foreign: func(t *testing.T, tenant, session string) func() bool {
			sb := f.Put(sandbox.Sandbox{Tenant: tenant, Session: session, State: sandbox.StateRunning})
			t.Cleanup(func() { f.Remove(t.Context(), sb.ID) })
			return func() bool {
				_, err := f.Get(t.Context(), tenant, session)
				return err != nil && !isNotFound(err)
			}
		},
	})
}

func isNotFound(err error) bool { return errors.Is(err, sandbox.ErrNotFound) }
