package sandbox_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
)

func TestWithMounts(t *testing.T) {
	mounts := []sandbox.Mount{{Source: "/srv/data", Target: "/data", ReadOnly: true}, {Source: "/srv/cache", Target: "/cache"}}
	s := complete(t, sandbox.WithMounts(mounts...))
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	mounts[0].Target = "/changed"
	if len(s.Mounts) != 2 || s.Mounts[0].Target != "/data" || !s.Mounts[0].ReadOnly || s.Mounts[1].ReadOnly {
		t.Errorf("Mounts = %+v", s.Mounts)
	}
	c := s.Clone()
	c.Mounts[1].Target = "/x"
	if s.Mounts[1].Target != "/cache" {
		t.Error("Clone shares Mounts")
	}
}

// Every bad mount is refused with ErrInvalid, naming the mount and why.
func TestWithMountsErrors(t *testing.T) {
	cases := []struct {
		name   string
		mounts []sandbox.Mount
		want   string
	}{
		{"relative source", []sandbox.Mount{{Source: "srv", Target: "/d"}}, `mounts: [0]: source "srv" must be an absolute, clean host path`},
		{"unclean source", []sandbox.Mount{{Source: "/srv/../etc", Target: "/d"}}, `source "/srv/../etc" must be an absolute, clean host path`},
		{"relative target", []sandbox.Mount{{Source: "/srv", Target: "d"}}, `mounts: [0]: target "d" must be an absolute path`},
		{"unclean target", []sandbox.Mount{{Source: "/srv", Target: "/d/../e"}}, `target "/d/../e" is not clean (/e)`},
		{"root", []sandbox.Mount{{Source: "/srv", Target: "/"}}, `target "/" overlaps /.shellbox`},
		{"workspace", []sandbox.Mount{{Source: "/srv", Target: "/workspace"}}, `target "/workspace" overlaps /workspace, which shellbox or the engine manages`},
		{"below workspace", []sandbox.Mount{{Source: "/srv", Target: "/workspace/data"}}, "overlaps /workspace"},
		{"tmp", []sandbox.Mount{{Source: "/srv", Target: "/tmp/x"}}, "overlaps /tmp"},
		{"agent", []sandbox.Mount{{Source: "/srv", Target: "/.shellbox"}}, "overlaps /.shellbox"},
		{"above host dir", []sandbox.Mount{{Source: "/srv", Target: "/run"}}, "overlaps /run/shellbox"},
		{"below host dir", []sandbox.Mount{{Source: "/srv", Target: "/run/shellbox/spill"}}, "overlaps /run/shellbox"},
		{"proc", []sandbox.Mount{{Source: "/srv", Target: "/proc/sys"}}, "overlaps /proc"},
		{"sys", []sandbox.Mount{{Source: "/srv", Target: "/sys"}}, "overlaps /sys"},
		{"dev", []sandbox.Mount{{Source: "/srv", Target: "/dev/shm"}}, "overlaps /dev"},
		{"etc", []sandbox.Mount{{Source: "/srv", Target: "/etc"}}, "overlaps /etc/hosts"},
		{"overlap", []sandbox.Mount{{Source: "/a", Target: "/data"}, {Source: "/b", Target: "/data/b"}}, "mounts: [1]: target /data/b overlaps the target /data of mounts[0]"},
		{"same target", []sandbox.Mount{{Source: "/a", Target: "/data"}, {Source: "/b", Target: "/data"}}, "target /data overlaps the target /data"},
		{"relative root", []sandbox.Mount{{Source: "/srv/a", Root: "srv", Target: "/d"}}, `mounts: [0]: root "srv" must be an absolute, clean host path`},
		{"source not below root", []sandbox.Mount{{Source: "/srv/a", Root: "/srv/b", Target: "/d"}}, "mounts: [0]: source /srv/a is not below its root /srv/b"},
		{"too many", make([]sandbox.Mount, sandbox.MaxMounts+1), "mounts: 33 mounts: at most 32"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := sandbox.NewSpec("acme", "s-1", sandbox.WithMounts(c.mounts...))
			if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("err = %v\nwant %s", err, c.want)
			}
		})
	}
	// Validate applies the same checks to a Spec built by hand.
	s := complete(t)
	s.Mounts = []sandbox.Mount{{Source: "/srv", Target: "/workspace"}}
	if err := s.Validate(); !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "overlaps /workspace") {
		t.Errorf("Validate: %v", err)
	}
}
