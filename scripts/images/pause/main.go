// Command pause is the pod sandbox's process: it holds the pod's namespaces, reaps
// zombies (it is PID 1 when the pod shares its PID namespace) and exits 0 on SIGTERM or
// SIGINT. The local cluster imports it as the sandbox image, since there is no registry
// to pull registry.k8s.io/pause from.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var status syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
