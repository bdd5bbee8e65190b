// Package procstatus reads /proc/<pid>/status, the same way for the
// command runner (executor/local: tags and grants) and the agent's egress
// proxy (agent/egress: who holds a socket).
package procstatus

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// Groups returns the supplementary groups of the Groups line of a
// /proc/<pid>/status read from r.
func Groups(r io.Reader) ([]uint32, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("Groups:"))
		if !ok {
			continue
		}
		var groups []uint32
		for _, g := range bytes.Fields(rest) {
			v, err := strconv.ParseUint(string(g), 10, 32)
			if err != nil {
				return nil, fmt.Errorf("malformed Groups line %q", sc.Bytes())
			}
			groups = append(groups, uint32(v))
		}
		return groups, nil
	}
	return nil, errors.New("no Groups line")
}
