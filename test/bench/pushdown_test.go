package main

import (
	"io"
	"strings"
	"testing"
)

// TestPushdownFlags: -pushdown defaults to 10,000 Widgets, 1% labelled,
// and refuses another mode beside it or a share that is no percent.
func TestPushdownFlags(t *testing.T) {
	cfg, err := parseFlags([]string{"-pushdown"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.counts) != 1 || cfg.counts[0] != 10000 || cfg.labelled != 1 {
		t.Errorf("counts %v, labelled %v; want [10000], 1", cfg.counts, cfg.labelled)
	}
	for _, bad := range [][]string{{"-pushdown", "-timers"}, {"-pushdown", "-failover"}, {"-pushdown", "-labelled", "0"}, {"-pushdown", "-labelled", "101"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

// TestPushdownReportJudgesWhatIsCached: the verdict fails when the broker
// with pushdown caches more than the labelled Widgets.
func TestPushdownReportJudgesWhatIsCached(t *testing.T) {
	cfg := &config{counts: []int{1000}, pairs: 1, labelled: 1}
	rows := []pushdownRow{
		{n: 1000, mode: pushOn, round: 1, cached: 10, mem: memPeak{rss: 50, private: 10}},
		{n: 1000, mode: pushOff, round: 1, cached: 1000, mem: memPeak{rss: 60, private: 20}},
	}
	var out strings.Builder
	if !reportPushdown(&out, cfg, rows) {
		t.Errorf("10 of 1,000 cached with 1%% labelled judged a miss:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "N=1000: broker peak RSS 50.0 MiB with pushdown, 60.0 without") {
		t.Errorf("no summary line:\n%s", out.String())
	}
	rows[0].cached = 1000
	if reportPushdown(io.Discard, cfg, rows) {
		t.Error("everything cached with pushdown judged a pass")
	}
}
