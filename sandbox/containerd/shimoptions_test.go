package containerd

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/shellbox/shellbox/sandbox"
)

// TestCheckShimOptions: a runsc sandbox is refused at once, with what to
// fix, when gVisor's shim would start it unreachable (no options file, a
// file missing or without host-uds); runc needs none.
func TestCheckShimOptions(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.toml", "binary_name = \"/usr/bin/runsc\"\n[runsc_config]\n  host-uds = \"create\"\n  network = \"none\"\n")
	noUDS := write("nouds.toml", "[runsc_config]\n  network = \"none\"\n")
	for _, tc := range []struct {
		name, runtime, path, want string
	}{
		{"runc", sandbox.RuntimeRunc, "", ""},
		{"good", sandbox.RuntimeRunsc, good, ""},
		{"no file", sandbox.RuntimeRunsc, "", "has no options file"},
		{"missing", sandbox.RuntimeRunsc, filepath.Join(dir, "gone.toml"), "no such file"},
		{"no host-uds", sandbox.RuntimeRunsc, noUDS, "does not set host-uds"},
		// Not gVisor's shim under the runsc name: containerd names it when
		// it refuses it.
		{"other shim", "other-shim", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &Runtime{cfg: Config{RuntimeConfigs: map[string]string{},
				RuntimeNames: map[string]string{sandbox.RuntimeRunsc: "io.containerd.runsc.v1"}}}
			rt := tc.runtime
			if rt == "other-shim" {
				r.cfg.RuntimeNames[sandbox.RuntimeRunsc] = "io.containerd.shellbox-absent.v1"
				tc.runtime = sandbox.RuntimeRunsc
			}
			if tc.path != "" {
				r.cfg.RuntimeConfigs[tc.runtime] = tc.path
			}
			err := r.checkShimOptions(tc.runtime)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want unavailable: …%s…", err, tc.want)
			}
		})
	}
}
