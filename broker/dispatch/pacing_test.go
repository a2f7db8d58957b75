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
	a, b := &object{work: &objectWork{}}, &object{work: &objectWork{}}
	if wait := ow.turn(a); wait != 0 {
		t.Fatalf("the first write waits %v", wait)
	}
	ow.inFlight.done(time.Millisecond)
	if first := ow.turn(b); first != time.Second {
		t.Fatalf("the second write waits %v, want 1s", first)
	}
	// Looking again before its turn neither loses its place nor takes
	// another turn.
	clk.Step(300 * time.Millisecond)
	if again := ow.turn(b); again != 700*time.Millisecond {
		t.Errorf("asking again 300ms later: waits %v, want 700ms", again)
	}
	if c := ow.turn(&object{work: &objectWork{}}); c != 1700*time.Millisecond {
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
	a, b, c := &object{work: &objectWork{}}, &object{work: &objectWork{}}, &object{work: &objectWork{}}
	for _, o := range []*object{a, b} {
		if wait := ow.turn(o); wait != 0 {
			t.Fatalf("a write with a place free waits %v", wait)
		}
	}
	if wait := ow.turn(c); wait != minServiceInterval {
		t.Fatalf("the third write, with both places taken and no request timed yet, waits %v, want %v", wait, minServiceInterval)
	}
	ow.inFlight.done(100 * time.Millisecond)
	clk.Step(minServiceInterval)
	if again := ow.turn(c); again != 0 {
		t.Errorf("once a place is given back, the third write still waits %v", again)
	}
	ow.inFlight.done(100 * time.Millisecond)
	ow.inFlight.done(100 * time.Millisecond)
	if n := ow.inFlight.n; n != 0 {
		t.Errorf("%d places still taken after every write was done", n)
	}
}

func TestWritesThatFindNoPlaceComeBackOneServiceIntervalApart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	ow := &objectWriter{opts: &Options{WriteLimiter: NewWriteLimiter(1000, 1000), Clock: clk}}
	ow.inFlight.max = 4
	for range 4 {
		if wait := ow.turn(&object{work: &objectWork{}}); wait != 0 {
			t.Fatalf("a write with a place free waits %v", wait)
		}
	}
	// Requests take 200ms, so with 4 under way a place frees every 50ms.
	ow.inFlight.done(200 * time.Millisecond)
	if !ow.inFlight.start() {
		t.Fatal("no place after one was given back")
	}
	for i := 1; i <= 3; i++ {
		if wait, want := ow.turn(&object{work: &objectWork{}}), time.Duration(i)*50*time.Millisecond; wait != want {
			t.Errorf("write %d sent back waits %v, want %v", i, wait, want)
		}
	}
	// Time passes: the next one sent back counts from now, not from the
	// last turn handed out.
	clk.Step(time.Second)
	if wait := ow.turn(&object{work: &objectWork{}}); wait != 50*time.Millisecond {
		t.Errorf("a write sent back a second later waits %v, want 50ms", wait)
	}
}
