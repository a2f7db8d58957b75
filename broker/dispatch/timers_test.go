package dispatch

import (
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

func TestReturnTick(t *testing.T) {
	o := &object{uid: "u"}
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
