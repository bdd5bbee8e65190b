package local

import (
	"bytes"
	"fmt"
	"os"
	"strconv"

	"github.com/shellbox/shellbox/internal/procscan"
)

// procStat is what shellbox needs from /proc/<pid>/stat.
type procStat struct {
	state byte   // R, S, D, Z, ...
	pgrp  int    // process group
	start uint64 // start time in clock ticks since boot
}

func readProcStat(pid int) (procStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, err
	}
	return parseProcStat(b)
}

// parseProcStat parses "pid (comm) state ppid pgrp ... starttime ...". comm
// may hold spaces and parentheses, so fields are counted from the last ')'.
func parseProcStat(b []byte) (procStat, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, fmt.Errorf("malformed stat %q", b)
	}
	f := bytes.Fields(b[i+1:])
	// f[0] state, f[1] ppid, f[2] pgrp, ..., f[19] starttime.
	if len(f) < 20 || len(f[0]) != 1 {
		return procStat{}, fmt.Errorf("malformed stat %q", b)
	}
	pgrp, err := strconv.Atoi(string(f[2]))
	if err != nil {
		return procStat{}, fmt.Errorf("malformed stat %q", b)
	}
	start, err := strconv.ParseUint(string(f[19]), 10, 64)
	if err != nil {
		return procStat{}, fmt.Errorf("malformed stat %q", b)
	}
	return procStat{state: f[0][0], pgrp: pgrp, start: start}, nil
}

// groupAlive reports whether a live (not zombie) process is in process group
// pgid. It scans /proc: the fallback when no cgroup tracks the tree.
func groupAlive(pgid int) bool {
	defer procscan.Slot()()
	names, _ := procscan.Names() // on an error, those read before it (none: false)
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil {
			continue
		}
		st, err := readProcStat(pid)
		if err != nil || st.pgrp != pgid {
			continue
		}
		if st.state != 'Z' && st.state != 'X' && st.state != 'x' {
			return true
		}
	}
	return false
}

// alive reports whether process pid exists and started at start: a pid alone
// may have been reused.
func alive(pid int, start uint64) bool {
	st, err := readProcStat(pid)
	return err == nil && st.start == start && st.state != 'Z' && st.state != 'X'
}
