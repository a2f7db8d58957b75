package main

import (
	"os"
	"testing"
	"time"
)

func TestParseTimers(t *testing.T) {
	c := &config{window: 64, duration: time.Minute}
	if err := c.parseTimers("2000, 10000", "1s,10s", false); err != nil {
		t.Fatal(err)
	}
	if len(c.objects) != 2 || c.objects[1] != 10000 || len(c.intervals) != 2 || c.intervals[1] != 10*time.Second {
		t.Errorf("objects %v intervals %v", c.objects, c.intervals)
	}
	if c.window != timerDefaultWindow {
		t.Errorf("window %d, want the timer default %d", c.window, timerDefaultWindow)
	}
	c = &config{window: 64, duration: time.Minute}
	if err := c.parseTimers("10", "1s", true); err != nil || c.window != 64 {
		t.Errorf("an explicit -window must stay: %d, %v", c.window, err)
	}
	for _, bad := range [][2]string{{"0", "1s"}, {"x", "1s"}, {"10", "50ms"}, {"10", "soon"}} {
		c := &config{duration: time.Minute}
		if err := c.parseTimers(bad[0], bad[1], false); err == nil {
			t.Errorf("-objects %q -intervals %q: no error", bad[0], bad[1])
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
	for iv, want := range map[time.Duration]string{time.Second: "bench-timers-1s-5", 1500 * time.Millisecond: "bench-timers-1p5s-5", time.Minute: "bench-timers-1m0s-5"} {
		if got := nsName(iv, 5); got != want {
			t.Errorf("nsName(%v) = %q, want %q", iv, got, want)
		}
	}
}
