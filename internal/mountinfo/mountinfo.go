// Package mountinfo reads this process's mount table
// (/proc/self/mountinfo) for the places that must know what is mounted
// where: host directories and state directories being removed, mount
// sources gVisor cannot bind, cgroup hierarchies. Standard library only.
package mountinfo

import (
	"bufio"
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

// Cgroup is one cgroupfs mount of this process: where it is mounted (Dir),
// which cgroup of its hierarchy that is (Root), and, for v1, its options,
// the controllers among them.
type Cgroup struct {
	Dir, Root string
	V2        bool
	Opts      []string
}

// Cgroups lists the cgroup and cgroup2 mounts of this process.
func Cgroups() ([]Cgroup, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []Cgroup
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [tags] - fstype source superopts
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		pf, sf := strings.Fields(pre), strings.Fields(post)
		if len(pf) < 5 || len(sf) < 3 || (sf[0] != "cgroup" && sf[0] != "cgroup2") {
			continue
		}
		out = append(out, Cgroup{
			Dir:  Unescape(pf[4]),
			Root: Unescape(pf[3]),
			V2:   sf[0] == "cgroup2",
			Opts: strings.Split(sf[2], ","),
		})
	}
	return out, sc.Err()
}
