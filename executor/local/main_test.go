package local

import (
	"testing"

	"github.com/shellbox/shellbox/executor/local/localtest"
)

func TestMain(m *testing.M) { localtest.Main(m) }
