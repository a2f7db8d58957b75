package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/bench/timerstats"
)

// TestScaleTableHasTheSlopeAndJudgesEveryGoal: one line per count with the
// medians of its rounds, the broker's private memory added per object
// between counts, and a verdict that fails on any goal.
func TestScaleTableHasTheSlopeAndJudgesEveryGoal(t *testing.T) {
	cfg := &config{counts: []int{1000, 100000}, pairs: 3, scale: true}
	var rows []row
	add := func(scenario string, n, round int, phase string, seconds, brokerPrivate float64) {
		mem := []memPeak{{role: "raw", rss: 30, private: 10}}
		if scenario == "broker" {
			mem = []memPeak{{role: "broker", rss: 50 + brokerPrivate, private: brokerPrivate}, {role: "handler", rss: 20, private: 5}}
		}
		rows = append(rows, row{scenario: scenario, n: n, round: round, phase: phase, seconds: seconds,
			writes: delta{controller: float64(n)}, cpuParts: []time.Duration{time.Duration(n) * time.Millisecond}, mem: mem})
	}
	for round := 1; round <= 3; round++ {
		for _, phase := range []string{"create", "delete"} {
			add("broker", 1000, round, phase, 1, 20)
			add("raw", 1000, round, phase, 1, 0)
		}
	}
	// 100,000 runs one round; the broker's private memory grows by 99 MiB
	// for 99,000 objects: 1.02 KiB each.
	add("broker", 100000, 1, "create", 100, 119)
	add("broker", 100000, 1, "delete", 100, 119)
	add("raw", 100000, 1, "create", 100, 0)
	add("raw", 100000, 1, "delete", 100, 0)
	timers := timerRow{mode: modePlain, interval: 10 * time.Second, objects: 100000, broker: 0.5,
		summary: timerstats.WindowStats{Expected: 1000, Delivered: 1000, P99Ms: 20}}

	var out strings.Builder
	if !reportScale(&out, cfg, rows, []timerRow{timers}) {
		t.Errorf("goals met, verdict failed:\n%s", out.String())
	}
	for _, want := range []string{
		"1000    3       1000.0 1000.0 (100%)",
		"100000  1       1000.0 1000.0 (100%)",
		"  1.02\n",
		"100000 timers at 10s (plain): delivered 100.00% (goal >= 99.9%): PASS",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the scale table does not say %q:\n%s", want, out.String())
		}
	}
	timers.broker = 1.2
	out.Reset()
	if reportScale(&out, cfg, rows, []timerRow{timers}) {
		t.Errorf("a broker over one core for the timers passed:\n%s", out.String())
	}
}
