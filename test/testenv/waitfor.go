package testenv

import (
	"context"
	"testing"
	"time"
)

// WaitFor checks check at once and then every 200ms until it returns nil,
// and fails the test with check's last error, naming what it waited for, if
// timeout passes first. It returns how long it waited. Use it where the
// reason a condition does not hold yet is worth reading (a state of the
// cluster); Eventually where a yes or no is enough. A check the deadline
// cut short says only that; the error before it said why, so that one is
// reported.
func WaitFor(t testing.TB, timeout time.Duration, what string, check func(context.Context) error) time.Duration {
	t.Helper()
	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		err := check(ctx)
		if err == nil {
			return time.Since(begin)
		}
		if ctx.Err() == nil || last == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting %s for %s: %v", timeout, what, last)
		case <-tick.C:
		}
	}
}
