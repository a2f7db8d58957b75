// Command pause is the sandbox process of every Pod on test/node's node, in
// the image tether.dev/pause:dev that the run builds: it holds the Pod's
// namespaces, reaps the zombies a shared PID namespace hands it, and exits
// on SIGTERM or SIGINT, as Kubernetes' own pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGCHLD)
	for s := range sigs {
		if s != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
