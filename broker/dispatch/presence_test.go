package dispatch

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/session"
)

// TestHandlerIsAbsentOnlyPastItsGrace steps the injected clock through one
// absence: present while an instance is connected, in its grace for the
// grace after the last one left, absent past it, long absent past
// absent_release_after, and present again the moment an instance returns.
// The grace never counts from before the broker could accept instances.
func TestHandlerIsAbsentOnlyPastItsGrace(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	m := New(Options{Clock: clk})
	rt := newController(m, "h", nil, "", nil)
	rt.presence.setLimits(10*time.Second, time.Minute)
	in := &session.Instance{Handler: "h", ID: "a"}
	step := func(d time.Duration, want contract.Presence) {
		t.Helper()
		clk.Step(d)
		if got := rt.presence.now(); got != want {
			t.Fatalf("at +%v: presence %v, want %v", clk.Since(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)), got, want)
		}
	}

	// Restored from a Lease that says it left long ago, before this broker
	// could accept anyone: its grace has not started. Once it has run out,
	// the handler has been away longer than absent_release_after too.
	rt.presence.absentSince = clk.Now().Add(-time.Hour)
	step(time.Hour, contract.InGrace)
	m.accepting.Store(clk.Now().UnixNano())
	step(10*time.Second-time.Millisecond, contract.InGrace)
	step(time.Millisecond, contract.LongAbsent)

	if returned := rt.presence.join(in); !returned {
		t.Fatal("the first instance to join is not reported as the handler's return")
	}
	step(time.Hour, contract.Present)
	rt.presence.leave(in)
	step(10*time.Second-time.Millisecond, contract.InGrace)
	step(time.Millisecond, contract.Absent)
	step(50*time.Second-time.Millisecond, contract.Absent)
	step(time.Millisecond, contract.LongAbsent)
	rt.presence.join(in)
	step(0, contract.Present)
}
