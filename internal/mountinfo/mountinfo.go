// Package mountinfo reads this process's mount table
// (/proc/self/mountinfo) for the places that must know what is mounted
// where: host directories and state directories being removed, mount
// sources gVisor cannot bind, cgroup hierarchies. Standard library only.
package mountinfo

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Unescape undoes mountinfo's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Under returns the mount points at dir or below it, sorted; dir is made
// absolute and its symlinks resolved first (where it exists).
func Under(dir string) ([]string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if real, err := filepath.EvalSymlinks(dir); err == nil {
		dir = real
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if mp := Unescape(f[4]); mp == dir || strings.HasPrefix(mp, dir+"/") {
			out = append(out, mp)
		}
	}
	sort.Strings(out)
	return out, nil
}
