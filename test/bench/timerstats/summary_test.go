package timerstats

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// log builds Ticks for the tests.
type log struct {
	Ticks
	ids map[string]int32
}

// add records a tick of uid due at due (from base) that arrived late after
// it and was acked at once.
func (r *log) add(base time.Time, uid string, due, late time.Duration) {
	id, ok := r.ids[uid]
	if !ok {
		if r.ids == nil {
			r.ids = map[string]int32{}
		}
		id = int32(len(r.UIDs))
		r.ids[uid] = id
		r.UIDs = append(r.UIDs, uid)
	}
	at := base.Add(due + late).UnixNano()
	r.Add(id, at, base.Add(due).UnixNano(), at)
}

func TestSummaryCountsTicksByDueTime(t *testing.T) {
	const ms = time.Millisecond
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	w := &Window{FromUnixNano: base.UnixNano(), ToUnixNano: base.Add(4 * time.Second).UnixNano()}
	plain := Schedule{Interval: time.Second, Tolerance: 500 * ms}
	sharp := Schedule{Interval: time.Second, Sharp: true, Tolerance: 500 * ms}
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
		sc                                  Schedule
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
			r := &log{}
			for _, tk := range tc.ticks {
				r.add(base, tk.uid, tk.due, tk.late)
			}
			ws := Summarize(&r.Ticks, w, tc.sc).InWindow
			if ws.Expected != tc.expected || ws.Delivered != tc.delivered || ws.Missed != tc.missed || ws.Arrived != tc.arrive {
				t.Errorf("expected %d delivered %d missed %d arrived %d, want %d %d %d %d",
					ws.Expected, ws.Delivered, ws.Missed, ws.Arrived, tc.expected, tc.delivered, tc.missed, tc.arrive)
			}
		})
	}
}

func TestSummaryLatenessPeriodAndSlip(t *testing.T) {
	r := &log{}
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
	w := &Window{FromUnixNano: base.UnixNano(), ToUnixNano: base.Add(4 * time.Second).UnixNano()}
	s := Summarize(&r.Ticks, w, Schedule{Interval: time.Second, Tolerance: 500 * time.Millisecond})
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
	if got := Summarize(&r.Ticks, nil, Schedule{Interval: time.Second}); got.InWindow != nil {
		t.Error("a summary without a window has window stats")
	}
}

func TestToleranceDefaultsToHalfTheInterval(t *testing.T) {
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	w := &Window{FromUnixNano: base.UnixNano(), ToUnixNano: base.Add(4 * time.Second).UnixNano()}
	// The next tick due 1.4 s after the previous one is late, not a miss;
	// 1.6 s after it, one tick in between was missed.
	for _, tc := range []struct {
		gap    time.Duration
		missed int64
	}{{1400 * time.Millisecond, 0}, {1600 * time.Millisecond, 1}} {
		r := &log{}
		r.add(base, "a", 0, 0)
		r.add(base, "a", tc.gap, 0)
		r.add(base, "a", tc.gap+time.Second, 0)
		r.add(base, "a", tc.gap+2*time.Second, 0)
		if ws := Summarize(&r.Ticks, w, Schedule{Interval: time.Second}).InWindow; ws.Missed != tc.missed {
			t.Errorf("next tick %s later: %d missed, want %d", tc.gap, ws.Missed, tc.missed)
		}
	}
}

func TestReadTicks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// As the Python handler writes it.
	good := write("good.json", `{"uids": ["u1", "u2"], "object": [0, 1, 0],
		"arrival_unix_nano": [1000000005, 1000000007, 2000000009],
		"scheduled_unix_nano": [1000000000, 1000000001, 2000000000],
		"ack_unix_nano": [1000000006, 1000000008, 2000000010]}`)
	tk, err := ReadTicks(good)
	if err != nil {
		t.Fatal(err)
	}
	if tk.Len() != 3 || len(tk.UIDs) != 2 || tk.Object[1] != 1 || tk.Arrival[2] != 2000000009 ||
		tk.Scheduled[1] != 1000000001 || tk.Ack[0] != 1000000006 {
		t.Errorf("ticks %+v", tk)
	}
	for name, body := range map[string]string{
		"short.json":  `{"uids": ["u1"], "object": [0, 0], "arrival_unix_nano": [1, 2], "scheduled_unix_nano": [1], "ack_unix_nano": [1, 2]}`,
		"range.json":  `{"uids": ["u1"], "object": [1], "arrival_unix_nano": [1], "scheduled_unix_nano": [1], "ack_unix_nano": [1]}`,
		"broken.json": `{"uids": [`,
	} {
		if _, err := ReadTicks(write(name, body)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
	if _, err := ReadTicks(filepath.Join(dir, "absent.json")); !os.IsNotExist(err) {
		t.Errorf("absent file: %v", err)
	}
}
