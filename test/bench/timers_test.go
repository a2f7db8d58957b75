package main

import (
	"os"
	"testing"
	"time"
)

func TestParseTimers(t *testing.T) {
	c := &config{window: 64, duration: time.Minute}
	if err := c.parseTimers("2000, 10000", "1s,10s", "plain, sharp,plain", false); err != nil {
		t.Fatal(err)
	}
	if len(c.objects) != 2 || c.objects[1] != 10000 || len(c.intervals) != 2 || c.intervals[1] != 10*time.Second {
		t.Errorf("objects %v intervals %v", c.objects, c.intervals)
	}
	if len(c.modes) != 2 || c.modes[0] != modePlain || c.modes[1] != modeSharp {
		t.Errorf("modes %v", c.modes)
	}
	if c.window != timerDefaultWindow {
		t.Errorf("window %d, want the timer default %d", c.window, timerDefaultWindow)
	}
	c = &config{window: 64, duration: time.Minute}
	if err := c.parseTimers("10", "1s", "plain", true); err != nil || c.window != 64 {
		t.Errorf("an explicit -window must stay: %d, %v", c.window, err)
	}
	for _, bad := range [][3]string{{"0", "1s", "plain"}, {"x", "1s", "plain"}, {"10", "50ms", "plain"}, {"10", "soon", "plain"}, {"10", "1s", "blunt"}} {
		c := &config{duration: time.Minute}
		if err := c.parseTimers(bad[0], bad[1], bad[2], false); err == nil {
			t.Errorf("-objects %q -intervals %q -modes %q: no error", bad[0], bad[1], bad[2])
		}
	}
}

func TestWritesIn(t *testing.T) {
	before := map[string]float64{"widgets.test.tether.dev": 10, "leases.coordination.k8s.io": 5, "events": 1}
	after := map[string]float64{"widgets.test.tether.dev": 12, "widgets.test.tether.dev/status": 1,
		"leases.coordination.k8s.io": 9, "events": 1, "events.events.k8s.io": 3}
	ours, other := writesIn(before, after)
	if ours != 6 {
		t.Errorf("writes on widgets and events: %v, want 6", ours)
	}
	if len(other) != 1 || other["leases.coordination.k8s.io"] != 4 {
		t.Errorf("other writes: %v", other)
	}
}

func TestCPUTime(t *testing.T) {
	if _, err := os.Stat("/proc/self/stat"); err != nil {
		t.Skip("no /proc")
	}
	deadline := time.Now().Add(50 * time.Millisecond)
	for time.Now().Before(deadline) {
	}
	d, err := cpuTime(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if d <= 0 {
		t.Errorf("cpu time %v after spinning", d)
	}
}

func TestNSName(t *testing.T) {
	for _, tc := range []struct {
		mode string
		iv   time.Duration
		want string
	}{
		{"", 0, "bench-timers-5"},
		{modePlain, time.Second, "bench-timers-plain-1s-5"},
		{modeSharp, 1500 * time.Millisecond, "bench-timers-sharp-1p5s-5"},
		{modePlain, time.Minute, "bench-timers-plain-1m0s-5"},
	} {
		if got := nsName(5, tc.mode, tc.iv); got != tc.want {
			t.Errorf("nsName(5, %q, %v) = %q, want %q", tc.mode, tc.iv, got, tc.want)
		}
	}
}
