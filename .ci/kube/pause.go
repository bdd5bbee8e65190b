// Command pause is the pod sandbox ("infra") process of the CI cluster
// (.ci/setup-kube.sh builds it into the image the cluster's containerd
// names as sandbox_image; there is no registry to pull registry.k8s.io/pause
// from). It sleeps until SIGINT or SIGTERM and reaps zombies, as it is PID 1
// of a pod that shares one pid namespace.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			if pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); pid <= 0 || err != nil {
				break
			}
		}
	}
}
