package dispatch

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/binding"
)

func TestSpreadStaysWithinOneInterval(t *testing.T) {
	const n, interval = 10000, time.Second
	var buckets [10]int
	for i := range n {
		uid := types.UID(string(rune('a'+i%26)) + time.Duration(i).String())
		off := spread(uid, interval)
		if off < 0 || off >= interval {
			t.Fatalf("offset %v outside [0, %v)", off, interval)
		}
		if again := spread(uid, interval); again != off {
			t.Fatalf("offset of %s changed: %v, then %v", uid, off, again)
		}
		buckets[off*10/interval]++
	}
	for i, c := range buckets {
		if c < n/10*8/10 || c > n/10*12/10 {
			t.Errorf("tenth %d of the interval has %d of %d first ticks: %v", i, c, n, buckets)
		}
	}
	if got := spread("x", 0); got != 0 {
		t.Errorf("spread with no interval: %v", got)
	}
}

func TestNextTick(t *testing.T) {
	plain := binding.TimerOptions{Interval: time.Second}
	sharp := binding.TimerOptions{Interval: time.Second, Sharp: true}
	due := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		t         binding.TimerOptions
		sent, ack time.Duration // after due
		want      time.Duration // after the ack
	}{
		{"plain, sent on time: one interval after the ack", plain, 0, 50 * time.Millisecond, time.Second},
		{"plain, sent late: its offset within the lateness on top", plain, 300 * time.Millisecond, 350 * time.Millisecond,
			time.Second + spread("u", 300*time.Millisecond)},
		{"plain, sent more than an interval late: an offset within one interval", plain, 5 * time.Second, 5 * time.Second,
			time.Second + spread("u", time.Second)},
		{"sharp: the next point of the grid", sharp, 300 * time.Millisecond, 400 * time.Millisecond, 600 * time.Millisecond},
		{"sharp, acked past a point: the one after", sharp, 300 * time.Millisecond, 1400 * time.Millisecond, 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ack := due.Add(tc.ack)
			if got := nextTick(tc.t, "u", due, due.Add(tc.sent), ack).Sub(ack); got != tc.want {
				t.Errorf("next tick %v after the ack, want %v", got, tc.want)
			}
		})
	}
}

// A stall holds back the ticks of 10,000 objects that came due evenly over
// 2 s; when it ends they are sent one after another, faster than they came
// due. Their successors must not stay bunched as they were sent: no tenth
// of the time they came due over may get more than twice its share.
func TestTicksBunchedByAStallSpreadOutAgain(t *testing.T) {
	const (
		n        = 10000
		stall    = 2 * time.Second
		interval = 10 * time.Second
		perTick  = 50 * time.Microsecond // the broker's pace once the stall ends
	)
	plain := binding.TimerOptions{Interval: interval}
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	next := make([]time.Time, n)
	for i := range n {
		uid := types.UID(time.Duration(i).String() + "-uid")
		due := start.Add(stall * time.Duration(i) / n)
		sent := start.Add(stall + perTick*time.Duration(i))
		next[i] = nextTick(plain, uid, due, sent, sent.Add(time.Millisecond))
	}
	first := slices.MinFunc(next, time.Time.Compare)
	bins := map[int]int{}
	for _, at := range next {
		bins[int(at.Sub(first)*10/stall)]++
	}
	for bin, c := range bins {
		if c > 2*n/10 {
			t.Errorf("%d of %d next ticks due in tenth %d after the first: %v", c, n, bin, bins)
		}
	}
}

func TestReturnTick(t *testing.T) {
	o := &object{work: &objectWork{}, uid: "u"}
	plain := binding.TimerOptions{Interval: time.Second}
	sharp := binding.TimerOptions{Interval: time.Second, Sharp: true}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	due := now.Add(-2500 * time.Millisecond)
	for _, tc := range []struct {
		name   string
		t      binding.TimerOptions
		due    time.Time
		listed bool
		want   time.Duration // after now
	}{
		{"not part of a return: at once", plain, due, false, 0},
		{"returning, plain: its offset", plain, due, true, spread("u", time.Second)},
		{"returning, sharp: next point of its grid", sharp, due, true, 500 * time.Millisecond},
		{"returning, due unknown: its offset", sharp, time.Time{}, true, spread("u", time.Second)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := returnTick(tc.t, o, tc.due, tc.listed, now).Sub(now); got != tc.want {
				t.Errorf("tick in %v, want %v", got, tc.want)
			}
		})
	}
}
