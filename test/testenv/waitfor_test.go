package testenv

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// fatalRecorder is a testing.TB whose Fatalf records the message and ends
// the calling goroutine, as testing's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestWaitForReportsWhyNotRatherThanTheDeadline: when the deadline cuts the
// last check short, the failure still says what was wrong before it.
func TestWaitForReportsWhyNotRatherThanTheDeadline(t *testing.T) {
	f := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		calls := 0
		WaitFor(f, 300*time.Millisecond, "the namespace gone", func(ctx context.Context) error {
			if calls++; calls == 1 {
				return errors.New("namespace x is Terminating")
			}
			<-ctx.Done()
			return fmt.Errorf("listing: %w", ctx.Err())
		})
	}()
	<-done
	if !strings.Contains(f.msg, "the namespace gone") || !strings.Contains(f.msg, "namespace x is Terminating") {
		t.Errorf("WaitFor failed with %q, want the check's error before the deadline", f.msg)
	}
}

// TestWaitForReturnsOnceTheConditionHolds: no failure, and the wait is
// measured.
func TestWaitForReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	took := WaitFor(t, 10*time.Second, "the third call", func(context.Context) error {
		if calls++; calls < 3 {
			return errors.New("not yet")
		}
		return nil
	})
	if calls != 3 || took <= 0 {
		t.Errorf("calls %d, took %s", calls, took)
	}
}
