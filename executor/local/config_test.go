package local

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shellbox/shellbox/executor"
)

func TestNewValidates(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "file")
	must(t, os.WriteFile(file, nil, 0o644))
	badLimits := executor.DefaultLimits()
	badLimits.TailBytes = -1
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{"relative root", Config{Root: "rel"}, "local: Root must be an absolute path"},
		{"missing root", Config{Root: "/nonexistent/x"}, "local: Root: stat /nonexistent/x"},
		{"root is a file", Config{Root: file}, "is not a directory"},
		{"relative home", Config{Home: "h"}, "local: Home must be an absolute path"},
		{"relative spill dir", Config{SpillDir: "s"}, "local: SpillDir must be an absolute path"},
		{"bad limits", Config{Limits: badLimits}, "local: Limits: tailBytes must be positive"},
		{"bad base env", Config{BaseEnv: []string{"NOEQUALS"}}, "local: BaseEnv: invalid environment entry"},
		{"bad cgroup mode", Config{Cgroup: "v3"}, "local: Cgroup must be auto, off, v1 or v2"},
		{"absolute cgroup parent", Config{CgroupParent: "/x"}, "local: CgroupParent"},
		{"escaping cgroup parent", Config{CgroupParent: "../x"}, "local: CgroupParent"},
		{"unclean cgroup parent", Config{CgroupParent: "a/../b"}, "local: CgroupParent"},
		{"oom score", Config{OOMScoreAdj: 1001}, "local: OOMScoreAdj must be within -1000..1000"},
		{"finished tasks", Config{MaxFinishedTasks: -1}, "local: MaxFinishedTasks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := tt.cfg
			if cfg.Root == "" {
				cfg.Root = t.TempDir()
			}
			if cfg.Cgroup == "" {
				cfg.Cgroup = CgroupOff
			}
			if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}

func TestNewDefaults(t *testing.T) {
	t.Parallel()
	wd, _ := os.Getwd()
	e, err := New(Config{Cgroup: CgroupOff})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(context.Background())
	c := e.cfg
	if c.Root != wd || c.Home != wd || c.SpillDir != filepath.Join(os.TempDir(), "shellbox-spill") ||
		c.Limits != executor.DefaultLimits() || c.CgroupParent != "shellbox" || c.MaxFinishedTasks != DefaultMaxFinishedTasks {
		t.Errorf("defaults: %+v", c)
	}
	want := []string{"PATH=" + DefaultPath, "HOME=" + wd, "DSH_HOME=" + wd, "LANG=C.UTF-8"}
	if !slices.Equal(c.BaseEnv, want) {
		t.Errorf("BaseEnv %q, want %q", c.BaseEnv, want)
	}
}

// TestResolve checks that Resolve uses Root, BaseEnv and the limits.
func TestResolve(t *testing.T) {
	t.Parallel()
	e := newExec(t, CgroupOff, func(c *Config) {
		c.BaseEnv = []string{"PATH=/bin", "A=base"}
		c.Limits.MaxTimeout = 30 * time.Second
	})
	spec, err := e.Resolve(context.Background(), executor.Request{
		Session: session, Command: "x", Workdir: "sub", Timeout: time.Hour,
		Env: map[string]string{"A": "managed", "DSH_SHELL": "1"},
	})
	if err != nil {
		t.Fatal(err)
	}
	root := e.cfg.Root
	if spec.Root != root || spec.Workdir != root+"/sub" || spec.Timeout != 30*time.Second || spec.Grace != 300*time.Millisecond {
		t.Errorf("spec %+v", spec)
	}
	if want := []string{"A=managed", "DSH_SHELL=1", "PATH=/bin"}; !slices.Equal(spec.Env, want) {
		t.Errorf("Env %q, want %q", spec.Env, want)
	}
}
