package dispatch

import (
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

func TestWriteLimiterTurns(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	for _, tc := range []struct {
		name       string
		qps        float64
		burst      int
		at         []time.Duration // when each write asks, from t0
		wantOffset []time.Duration // its turn, from t0
	}{
		{"burst goes at once, then one per interval", 10, 3,
			[]time.Duration{0, 0, 0, 0, 0},
			[]time.Duration{0, 0, 0, ms(100), ms(200)}},
		{"no burst", 10, 1,
			[]time.Duration{0, 0, 0},
			[]time.Duration{0, ms(100), ms(200)}},
		{"idle time refills the burst", 10, 2,
			[]time.Duration{0, 0, 0, ms(1000), ms(1000), ms(1000)},
			[]time.Duration{0, 0, ms(100), ms(1000), ms(1000), ms(1100)}},
		{"writes slower than the rate never wait", 10, 1,
			[]time.Duration{0, ms(150), ms(300)},
			[]time.Duration{0, ms(150), ms(300)}},
		{"no limit", 0, 0,
			[]time.Duration{0, 0, 0},
			[]time.Duration{0, 0, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := NewWriteLimiter(tc.qps, tc.burst)
			for i, at := range tc.at {
				if got := l.reserve(t0.Add(at)).Sub(t0); got != tc.wantOffset[i] {
					t.Errorf("write %d asking at %v: turn at %v, want %v", i, at, got, tc.wantOffset[i])
				}
			}
		})
	}
}

func TestWriteTurnKeepsItsReservation(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	ow := &objectWriter{opts: &Options{WriteLimiter: NewWriteLimiter(1, 1), Clock: clk}}
	a, b := &object{}, &object{}
	if wait := ow.turn(a); wait != 0 {
		t.Fatalf("the first write waits %v", wait)
	}
	ow.inFlight.done()
	if first := ow.turn(b); first != time.Second {
		t.Fatalf("the second write waits %v, want 1s", first)
	}
	// Looking again before its turn neither loses its place nor takes
	// another turn.
	clk.Step(300 * time.Millisecond)
	if again := ow.turn(b); again != 700*time.Millisecond {
		t.Errorf("asking again 300ms later: waits %v, want 700ms", again)
	}
	if c := ow.turn(&object{}); c != 1700*time.Millisecond {
		t.Errorf("a third object waits %v, want 1.7s (after the second)", c)
	}
	clk.Step(700 * time.Millisecond)
	if wait := ow.turn(b); wait != 0 {
		t.Errorf("at its turn the second write still waits %v", wait)
	}
}

func TestWriteWaitsForAPlaceInFlightWithoutHoldingAWorker(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	// Unpaced (a burst of 1000): only the places in flight make writes wait.
	ow := &objectWriter{opts: &Options{WriteLimiter: NewWriteLimiter(1000, 1000), Clock: clk}}
	ow.inFlight.max = 2
	a, b, c := &object{}, &object{}, &object{}
	for _, o := range []*object{a, b} {
		if wait := ow.turn(o); wait != 0 {
			t.Fatalf("a write with a place free waits %v", wait)
		}
	}
	wait := ow.turn(c)
	if wait < busyAgain {
		t.Fatalf("the third write, with both places taken, waits %v, want at least %v", wait, busyAgain)
	}
	if !c.writeAt.Equal(clk.Now()) {
		t.Errorf("the third write's next turn is %v, want a new turn now (the burst allows it)", c.writeAt)
	}
	ow.inFlight.done()
	clk.Step(wait)
	if again := ow.turn(c); again != 0 {
		t.Errorf("once a place is given back, the third write still waits %v", again)
	}
	ow.inFlight.done()
	ow.inFlight.done()
	if n := ow.inFlight.n.Load(); n != 0 {
		t.Errorf("%d places still taken after every write was done", n)
	}
}

func TestWriteThatFindsNoPlaceTakesALaterTurn(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	ow := &objectWriter{opts: &Options{WriteLimiter: NewWriteLimiter(10, 1), Clock: clk}}
	ow.inFlight.max = 1
	if wait := ow.turn(&object{}); wait != 0 {
		t.Fatalf("the first write waits %v", wait)
	}
	b := &object{}
	if wait := ow.turn(b); wait != 100*time.Millisecond {
		t.Fatalf("the second write waits %v, want its turn in 100ms", wait)
	}
	clk.Step(100 * time.Millisecond)
	// Its turn came, but the first write is still under way: it takes the
	// next turn of the rate, not one outside it.
	if wait := ow.turn(b); wait != 100*time.Millisecond {
		t.Errorf("at its turn, with no place free, the second write waits %v, want the next turn in 100ms", wait)
	}
}
