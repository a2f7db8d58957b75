// Command promtool runs Prometheus's promtool, built once from the Go module
// proxy into the control plane's cache folder (test/tools/promtool), with
// the arguments it is given:
//
//	go run ./test/promtool check rules deploy/helm/tether/files/alerts.yaml
//	go run ./test/promtool test rules test/promtool/testdata/alerts_test.yaml
//
// `make check` runs both. The first run builds promtool (a few minutes,
// with progress on stderr); later runs start it at once.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/tether-dev/tether/test/controlplane"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:]))
}

func run(ctx context.Context, args []string) int {
	path, err := controlplane.EnsurePromtool(ctx, controlplane.EnsureOptions{Progress: os.Stderr})
	if err != nil {
		fmt.Fprintf(os.Stderr, "promtool: %v\n", err)
		return 1
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "promtool: %v\n", err)
		return 1
	}
	return 0
}
