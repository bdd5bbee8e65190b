package hostdir

import "testing"

// SetLoopControl points the loop device probe at path for the test.
func SetLoopControl(t testing.TB, path string) {
	old := loopControl
	loopControl = path
	t.Cleanup(func() { loopControl = old })
}

// SetMkfsDirs replaces the directories searched for mkfs.ext4 besides
// PATH for the test.
func SetMkfsDirs(t testing.TB, dirs []string) {
	old := mkfsDirs
	mkfsDirs = dirs
	t.Cleanup(func() { mkfsDirs = old })
}

// Reserve is reserve, for the tests.
var Reserve = reserve
