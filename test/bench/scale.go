package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"
	"time"
)

// The -scale run (make bench-scale): the create/delete benchmark at each
// count of -n (default scaleCounts), then scaleTimers Widgets with a timer
// of scaleInterval, and one table of both.
const (
	scaleCounts   = "1000,10000,100000"
	scaleTimers   = 100000
	scaleInterval = 10 * time.Second
	// scaleOneRound: counts above it run one round instead of -pairs (a
	// round of 100,000 takes about 20 minutes on 2 cores).
	scaleOneRound = 10000
)

// The goals of issue 16 judged by the scale table.
const (
	goalScaleShare     = 0.95 // of the raw limit's objects/s, create and delete
	goalScaleTimerCore = 1.0  // broker cores for the 100,000 timers
)

// rounds is how many rounds count n runs.
func (c *config) rounds(n int) int {
	if c.scale && n > scaleOneRound {
		return 1
	}
	return c.pairs
}

// benchScale runs both benchmarks, each on a control plane of its own; tc
// is the configuration of the timer part.
func benchScale(ctx context.Context, cfg *config, stderr io.Writer) (rows []row, tc *config, trows []timerRow, err error) {
	if rows, err = bench(ctx, cfg, stderr); err != nil {
		return rows, nil, nil, err
	}
	c := *cfg
	c.timers, c.objects, c.intervals, c.modes = true, []int{scaleTimers}, []time.Duration{scaleInterval}, []string{modePlain}
	if !cfg.windowSet {
		c.window = timerDefaultWindow
	}
	trows, err = benchTimers(ctx, &c, stderr)
	return rows, &c, trows, err
}

// scaleLine is one count of the scale table: medians over rounds.
type scaleLine struct {
	n, rounds                int
	create, delete           [2]float64 // objects/s: broker, raw
	createShare, deleteShare float64    // broker's share of raw
	writes                   float64    // broker writes/object on create
	cpu                      [2]float64 // ms/object, mean of both phases: broker+handler, raw
	broker, handler, raw     memPeak    // the largest peaks of the rounds
	slope                    float64    // KiB of broker private memory per object added since the previous count
}

func scaleLines(cfg *config, rows []row) []scaleLine {
	var out []scaleLine
	for _, n := range cfg.counts {
		l := scaleLine{n: n}
		var brokerC, rawC, brokerD, rawD, shareC, shareD, wr, cpuB, cpuR []float64
		for round := 1; round <= cfg.rounds(n); round++ {
			get := func(scenario, phase string) *row {
				i := slices.IndexFunc(rows, func(r row) bool {
					return r.scenario == scenario && r.n == n && r.round == round && r.phase == phase
				})
				if i < 0 {
					return nil
				}
				return &rows[i]
			}
			bc, bd, rc, rd := get("broker", "create"), get("broker", "delete"), get("raw", "create"), get("raw", "delete")
			if bc == nil || bd == nil || rc == nil || rd == nil {
				continue
			}
			l.rounds++
			brokerC, rawC = append(brokerC, bc.rate()), append(rawC, rc.rate())
			brokerD, rawD = append(brokerD, bd.rate()), append(rawD, rd.rate())
			shareC, shareD = append(shareC, bc.rate()/rc.rate()), append(shareD, bd.rate()/rd.rate())
			wr = append(wr, bc.writes.controller/float64(n))
			cpuB = append(cpuB, (bc.cpuPerObject()+bd.cpuPerObject())/2)
			cpuR = append(cpuR, (rc.cpuPerObject()+rd.cpuPerObject())/2)
			for _, r := range []*row{bd, rd} { // the delete row has the peak over the whole count
				for _, m := range r.mem {
					switch m.role {
					case "broker":
						l.broker = larger(l.broker, m)
					case "handler":
						l.handler = larger(l.handler, m)
					case "raw":
						l.raw = larger(l.raw, m)
					}
				}
			}
		}
		if l.rounds == 0 {
			continue
		}
		l.create = [2]float64{median(brokerC), median(rawC)}
		l.delete = [2]float64{median(brokerD), median(rawD)}
		l.createShare, l.deleteShare = median(shareC), median(shareD)
		l.writes = median(wr)
		l.cpu = [2]float64{median(cpuB), median(cpuR)}
		if len(out) > 0 {
			prev := out[len(out)-1]
			l.slope = (l.broker.private - prev.broker.private) * 1024 / float64(n-prev.n)
		}
		out = append(out, l)
	}
	return out
}

func larger(a, b memPeak) memPeak {
	if b.err == nil && (a.role == "" || b.rss > a.rss) {
		return b
	}
	return a
}

// reportScale writes the one table of the scale run and its verdicts; it
// reports whether every goal was met.
func reportScale(w io.Writer, cfg *config, rows []row, trows []timerRow) bool {
	fmt.Fprintf(w, "Tether at scale: create/delete of N Widgets (broker and raw alternately, medians of the rounds; counts above %d one round), then %d Widgets with a %v timer\n\n",
		scaleOneRound, scaleTimers, scaleInterval)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "N\trounds\tcreate/s broker raw (share)\tdelete/s broker raw (share)\twrites/object\tCPU ms/object broker+handler raw\tpeak RSS MiB (private): broker\thandler\traw\tbroker private KiB/object added")
	ok := true
	lines := scaleLines(cfg, rows)
	for _, l := range lines {
		slope := "-"
		if l.slope != 0 {
			slope = fmt.Sprintf("%.2f", l.slope)
		}
		fmt.Fprintf(tw, "%d\t%d\t%.1f %.1f (%.0f%%)\t%.1f %.1f (%.0f%%)\t%.2f\t%.2f %.2f\t%s\t%s\t%s\t%s\n",
			l.n, l.rounds, l.create[0], l.create[1], 100*l.createShare, l.delete[0], l.delete[1], 100*l.deleteShare,
			l.writes, l.cpu[0], l.cpu[1], formatMemory([]memPeak{l.broker}), formatMemory([]memPeak{l.handler}), formatMemory([]memPeak{l.raw}), slope)
		ok = ok && l.createShare >= goalScaleShare && l.deleteShare >= goalScaleShare
	}
	tw.Flush()
	for _, r := range trows {
		delivered, p99, _, noWrites := r.meets()
		cores := r.broker < goalScaleTimerCore
		ok = ok && delivered && p99 && cores && noWrites
		fmt.Fprintf(w, "\n%d timers at %v (%s): delivered %.2f%% (goal >= 99.9%%): %s; p99 lateness %.1fms (goal < 100ms): %s; broker %.2f cores (goal < 1): %s; broker peak RSS %.1f MiB; API writes %.0f: %s\n",
			r.objects, r.interval, r.mode, 100*r.deliveredShare(), passFail(delivered), r.summary.P99Ms, passFail(p99),
			r.broker, passFail(cores), r.brokerRSS, r.writes, passFail(noWrites))
	}
	fmt.Fprintf(w, "\nGoals: create and delete >= %.0f%% of raw at every N, and the timer goals: %s\n", 100*goalScaleShare, passFail(ok))
	return ok
}
