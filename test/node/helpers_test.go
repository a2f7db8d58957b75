package node_test

import (
	"testing"
	"time"
)

// waitFor polls check every 200ms until it returns nil, failing the test
// with the last error after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting %s for %s: %v", timeout, what, err)
		}
		<-tick.C
	}
}
