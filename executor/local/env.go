package local

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"

	"github.com/shellbox/shellbox/executor"
)

// lookPath finds name on the PATH of env (not the server's PATH: the command
// runs with env, so its interpreter is found there).
func lookPath(name string, env []string) (string, error) {
	path := envValue(env, "PATH")
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", executor.Errorf(executor.ErrUnavailable, "%s not found on the command PATH (%s)", name, path)
}

// envValue is the value of key in env, the last one winning as in exec.
func envValue(env []string, key string) string {
	v := ""
	for _, kv := range env {
		if k, val, ok := strings.Cut(kv, "="); ok && k == key {
			v = val
		}
	}
	return v
}

// withPWD returns a copy of env with PWD set to dir (exec keeps the last of
// duplicate keys), so bash's $PWD is the real path, not /proc/self/fd/N.
func withPWD(env []string, dir string) []string {
	out := make([]string, 0, len(env)+1)
	out = append(out, env...)
	return append(out, "PWD="+dir)
}

// newID returns 12 random hex characters: unguessable task and call ids.
func newID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
