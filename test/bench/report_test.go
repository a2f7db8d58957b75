package main

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{[]float64{3}, 3}, {[]float64{3, 1, 2}, 2}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := median(tc.xs); got != tc.want {
			t.Errorf("median(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// TestReportJudgesTheMedianRound: one slow round does not make the
// verdict, and each round's share compares the runs of that round.
func TestReportJudgesTheMedianRound(t *testing.T) {
	cfg := &config{counts: []int{100}, pairs: 3}
	var rows []row
	add := func(scenario string, round int, create, del float64, writes float64) {
		rows = append(rows,
			row{scenario: scenario, n: 100, round: round, phase: "create", seconds: create, writes: delta{controller: writes}},
			row{scenario: scenario, n: 100, round: round, phase: "delete", seconds: del, writes: delta{controller: writes}})
	}
	// Broker at 90%, 50% (a noisy round), 95% of raw.
	add("broker", 1, 1/0.9, 1, 100)
	add("raw", 1, 1, 1, 100)
	add("raw", 2, 1, 1, 100)
	add("broker", 2, 2, 1, 100)
	add("broker", 3, 1/0.95, 1, 100)
	add("raw", 3, 1, 1, 100)
	var out strings.Builder
	if !report(&out, cfg, rows) {
		t.Errorf("the verdict failed on a median share of 90%%:\n%s", out.String())
	}
	for _, want := range []string{"N=100 create: broker 90.0 objects/s = 90% [50-95%] of raw 100.0 objects/s, medians of 3 rounds", "writes/object 1.00 [1.00-1.00]",
		"CPU ms/object", "peak RSS MiB (private)"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
}

// TestReportCPUAndMemory: the CPU column is per object, the memory column
// names every process after the controller's own, and a line per N and phase gives the
// medians of the CPU per object with their ranges; CPU does not decide the
// verdict.
func TestReportCPUAndMemory(t *testing.T) {
	cfg := &config{counts: []int{200}, pairs: 2}
	var rows []row
	add := func(scenario string, round int, phase string, cpu time.Duration, mem []memPeak) {
		rows = append(rows, row{scenario: scenario, n: 200, round: round, phase: phase, seconds: 1,
			writes: delta{controller: 200}, cpu: cpu, mem: mem})
	}
	brokerMem := []memPeak{{role: "broker", rss: 67.9, private: 31.2}, {role: "handler", rss: 21.2, private: 6.1}}
	rawMem := []memPeak{{role: "raw", rss: 25, private: 9.5}}
	// Broker+handler 2 and 3 ms/object on create, raw 0.5 and 1; far more
	// CPU than raw must not fail the run.
	add("broker", 1, "create", 400*time.Millisecond, brokerMem)
	add("broker", 1, "delete", 200*time.Millisecond, brokerMem)
	add("raw", 1, "create", 100*time.Millisecond, rawMem)
	add("raw", 1, "delete", 100*time.Millisecond, rawMem)
	add("raw", 2, "create", 200*time.Millisecond, rawMem)
	add("raw", 2, "delete", 100*time.Millisecond, rawMem)
	add("broker", 2, "create", 600*time.Millisecond, brokerMem)
	add("broker", 2, "delete", 200*time.Millisecond, brokerMem)
	var out strings.Builder
	if !report(&out, cfg, rows) {
		t.Errorf("CPU decided the verdict:\n%s", out.String())
	}
	lines := strings.Split(out.String(), "\n")
	var table []string
	for _, l := range lines {
		if strings.HasPrefix(l, "broker ") || strings.HasPrefix(l, "raw ") {
			table = append(table, strings.Join(strings.Fields(l), " "))
		}
	}
	for _, want := range []string{
		"broker 200 1 create 1.00 200.0 none 0.00 0.00 2.00 67.9 (31.2), handler 21.2 (6.1)",
		"raw 200 2 create 1.00 200.0 none 0.00 0.00 1.00 25.0 (9.5)",
	} {
		if !slices.Contains(table, want) {
			t.Errorf("no table row %q in:\n%s", want, out.String())
		}
	}
	for _, want := range []string{
		"N=200 create: CPU ms/object broker+handler 2.50 [2.00-3.00], raw 0.75 [0.50-1.00], medians of 2 rounds",
		"N=200 delete: CPU ms/object broker+handler 1.00 [1.00-1.00], raw 0.50 [0.50-0.50], medians of 2 rounds",
	} {
		if !slices.Contains(lines, want) {
			t.Errorf("no line %q in:\n%s", want, out.String())
		}
	}
}
