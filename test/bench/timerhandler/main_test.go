package main

import (
	"context"
	"testing"
	"time"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/bench/timerstats"
)

// add records a tick of uid due at due (from base) that arrived late after
// it and was acked at once.
func (r *recorder) add(base time.Time, uid string, due, late time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.ids[uid]
	if !ok {
		id = int32(len(r.ids))
		r.ids[uid] = id
	}
	r.arrival = append(r.arrival, base.Add(due+late).UnixNano())
	r.late = append(r.late, int64(late))
	r.ack = append(r.ack, 0)
	r.object = append(r.object, id)
}

func TestSummaryCountsTicksByDueTime(t *testing.T) {
	const ms = time.Millisecond
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	w := &timerstats.Window{FromUnixNano: base.UnixNano(), ToUnixNano: base.Add(4 * time.Second).UnixNano()}
	plain := schedule{interval: time.Second, tolerance: 500 * ms}
	sharp := schedule{interval: time.Second, sharp: true, tolerance: 500 * ms}
	type tick struct {
		uid       string
		due, late time.Duration
	}
	// chain builds a timer that ticks one interval after each ack: each
	// tick is due interval + slip after the previous arrival.
	chain := func(uid string, first time.Duration, late, slip time.Duration, n int) []tick {
		var out []tick
		due := first
		for range n {
			out = append(out, tick{uid, due, late})
			due += late + time.Second + slip
		}
		return out
	}
	for _, tc := range []struct {
		name                                string
		sc                                  schedule
		ticks                               []tick
		expected, delivered, missed, arrive int64
	}{
		{
			// Due at -0.99, 0.02, 1.03, 2.04, 3.05, 4.06 s (5 ms late, and
			// each due 5 ms after ack + interval): four due inside.
			name: "a timer after each ack: its own schedule, not a grid", sc: plain,
			ticks:    chain("a", -990*ms, 5*ms, 5*ms, 6),
			expected: 4, delivered: 4, missed: 0, arrive: 4,
		},
		{
			name: "a tick due inside and arriving after the window's end is delivered", sc: plain,
			ticks:    []tick{{"a", 2 * ms, time.Millisecond}, {"a", 1003 * ms, time.Millisecond}, {"a", 2004 * ms, time.Millisecond}, {"a", 3005 * ms, 1500 * ms}},
			expected: 4, delivered: 4, missed: 0, arrive: 3,
		},
		{
			// After the tick due at 1 s, the next is due at 3.2 s instead of
			// about 2 s: one missed.
			name: "a gap in the chain is a missed tick", sc: plain,
			ticks:    []tick{{"a", -time.Second, 0}, {"a", 0, 0}, {"a", time.Second, 0}, {"a", 3200 * ms, 0}},
			expected: 4, delivered: 3, missed: 1, arrive: 3,
		},
		{
			name: "no tick after the one due at 1 s: those due at about 2 and 3 s are missed", sc: plain,
			ticks:    []tick{{"a", 0, 0}, {"a", time.Second, 0}},
			expected: 4, delivered: 2, missed: 2, arrive: 2,
		},
		{
			name: "the same tick delivered twice counts once", sc: plain,
			ticks:    []tick{{"a", 0, 0}, {"a", 0, 200 * ms}, {"a", 1200 * ms, 0}, {"a", 2200 * ms, 0}, {"a", 3200 * ms, 0}},
			expected: 4, delivered: 4, missed: 0, arrive: 5,
		},
		{
			name: "a sharp timer skipping a point of its grid", sc: sharp,
			ticks:    []tick{{"a", -500 * ms, 0}, {"a", 500 * ms, 0}, {"a", 2500 * ms, 0}, {"a", 3500 * ms, 0}},
			expected: 4, delivered: 3, missed: 1, arrive: 3,
		},
		{
			name: "two objects", sc: sharp,
			ticks: []tick{
				{"a", 0, 0}, {"a", time.Second, 0}, {"a", 2 * time.Second, 0}, {"a", 3 * time.Second, 0},
				{"b", 100 * ms, 0}, {"b", 1100 * ms, 0},
			},
			expected: 8, delivered: 6, missed: 2, arrive: 6,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{ids: map[string]int32{}}
			for _, tk := range tc.ticks {
				r.add(base, tk.uid, tk.due, tk.late)
			}
			ws := r.summary(w, tc.sc).InWindow
			if ws.Expected != tc.expected || ws.Delivered != tc.delivered || ws.Missed != tc.missed || ws.Arrived != tc.arrive {
				t.Errorf("expected %d delivered %d missed %d arrived %d, want %d %d %d %d",
					ws.Expected, ws.Delivered, ws.Missed, ws.Arrived, tc.expected, tc.delivered, tc.missed, tc.arrive)
			}
		})
	}
}

func TestSummaryLatenessPeriodAndSlip(t *testing.T) {
	r := &recorder{ids: map[string]int32{}}
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	// Object a ticks due at 0, 1, 2 and 3 s (each 1 ms after the previous
	// arrival + 1 s), late by 1, 2, 3 and 4 ms; b once at 1.5 s, 10 ms late;
	// one tick of a falls before the window.
	r.add(base, "a", -time.Second-2*time.Millisecond, time.Millisecond)
	due := time.Duration(0)
	for i := range 4 {
		late := time.Duration(i+1) * time.Millisecond
		r.add(base, "a", due, late)
		due += late + time.Second + time.Millisecond
	}
	r.add(base, "b", 1500*time.Millisecond, 10*time.Millisecond)
	w := &timerstats.Window{FromUnixNano: base.UnixNano(), ToUnixNano: base.Add(4 * time.Second).UnixNano()}
	s := r.summary(w, schedule{interval: time.Second, tolerance: 500 * time.Millisecond})
	if s.Ticks != 6 || s.Objects != 2 {
		t.Errorf("totals %d ticks, %d objects", s.Ticks, s.Objects)
	}
	ws := s.InWindow
	if ws.Delivered != 5 || ws.Objects != 2 || ws.MinPerObject != 1 || ws.MaxPerObject != 4 {
		t.Errorf("window %+v", ws)
	}
	if ws.P50Ms != 3 || ws.MaxMs != 10 || ws.P99Ms != 10 {
		t.Errorf("lateness p50 %v p99 %v max %v", ws.P50Ms, ws.P99Ms, ws.MaxMs)
	}
	if ws.SlipP50Ms != 1 || ws.SlipP99Ms != 1 {
		t.Errorf("slip p50 %v p99 %v, want 1 ms", ws.SlipP50Ms, ws.SlipP99Ms)
	}
	if ws.MeanPeriodMs != 1004 {
		t.Errorf("mean period %v ms, want 1004", ws.MeanPeriodMs)
	}
	if got := r.summary(nil, schedule{interval: time.Second}); got.InWindow != nil {
		t.Error("a summary without a window has window stats")
	}
}

func TestTick(t *testing.T) {
	r := &recorder{ids: map[string]int32{}}
	ev := &sdk.Event{UID: "u", Scheduled: time.Now().Add(-5 * time.Millisecond)}
	if err := r.tick(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if st := r.stats(); st.Ticks != 1 || st.Objects != 1 {
		t.Errorf("stats %+v", st)
	}
	if r.late[0] < int64(5*time.Millisecond) || len(r.ack) != 1 {
		t.Errorf("lateness %v, %d acks", time.Duration(r.late[0]), len(r.ack))
	}
}
