package main

import (
	"errors"
)

// openContainerd opens the containerd runtime (sandbox/containerd).
func openContainerd(cfg Config, agent string) (sandboxRuntime, error) {
	return nil, errors.New("containerd backend: not built yet")
}
