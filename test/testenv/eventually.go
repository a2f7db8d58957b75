package testenv

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// pollInterval is how often Eventually checks its condition.
const pollInterval = 20 * time.Millisecond

// Eventually checks cond at once and then every 20ms until it holds, and
// fails the test, naming what it waited for, if timeout passes first.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), pollInterval, timeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
