package main

import (
	"strings"
	"testing"
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
	for _, want := range []string{"N=100 create: broker 90.0 objects/s = 90% [50-95%] of raw 100.0 objects/s, medians of 3 rounds", "writes/object 1.00 [1.00-1.00]"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
}
