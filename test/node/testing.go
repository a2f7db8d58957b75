package node

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// shared is the cluster RunTests started for this test binary.
var shared atomic.Pointer[Cluster]

// RunTests runs a test package against one one-node cluster. Call it from
// TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(node.RunTests(m)) }
//
// It parses the test flags, builds what is missing (progress on stderr),
// starts the cluster in a folder that is removed when everything passed and
// kept (its path printed) otherwise, runs the tests and stops the cluster.
// With -short, or on a machine that cannot run a node outside CI, no
// cluster is started and [Get] skips the test; in CI (CI set) such a
// machine fails the package.
func RunTests(m *testing.M) int {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	if err := CheckMachine(); err != nil {
		if os.Getenv("CI") != "" {
			fmt.Fprintf(os.Stderr, "node: %v\n", err)
			return 1
		}
		skipReason.Store(err.Error())
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "tether-test-node-")
	if err != nil {
		fmt.Fprintf(os.Stderr, "node: %v\n", err)
		return 1
	}
	keep := func(code int) int {
		fmt.Fprintf(os.Stderr, "node: the cluster's files and logs are kept in %s\n", dir)
		return code
	}
	logFile, err := os.Create(dir + "/harness.log")
	if err != nil {
		fmt.Fprintf(os.Stderr, "node: %v\n", err)
		return keep(1)
	}
	defer logFile.Close()
	log := hclog.New(&hclog.LoggerOptions{Name: "node", Output: logFile, Level: hclog.Debug})

	// First builds take about 20 minutes; the start itself has its own timeout.
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	c, err := Start(ctx, Options{Log: log, Progress: os.Stderr, Dir: dir + "/run"})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "node: %v\n", err)
		return keep(1)
	}
	if testing.Verbose() {
		fmt.Fprintf(os.Stderr, "node: %s ready in %s\n", NodeName, c.StartDuration().Round(time.Millisecond))
	}
	shared.Store(c)
	code := m.Run()
	shared.Store(nil)
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "node: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	if code != 0 {
		return keep(code)
	}
	_ = os.RemoveAll(dir)
	return code
}

// skipReason is why RunTests started no cluster on this machine.
var skipReason atomic.Value

// Get returns the cluster RunTests started for this test binary. It skips
// the test under -short or when the machine cannot run a node (outside CI),
// and fails it when TestMain does not use RunTests.
func Get(t testing.TB) *Cluster {
	t.Helper()
	if c := shared.Load(); c != nil {
		return c
	}
	if flag.Parsed() && testing.Short() {
		t.Skip("-short: no node")
	}
	if why, ok := skipReason.Load().(string); ok {
		t.Skip(why)
	}
	t.Fatal(errors.New("node.Get: no cluster; call node.RunTests from this package's TestMain"))
	return nil
}
