package main

// The create/delete benchmark's table and verdicts.

import (
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/tether-dev/tether/test/bench/workload"
	"github.com/tether-dev/tether/test/controlplane"
)

// The goals of issue 38, judged on the workload they are about
// (goalWorkload, a handler storing a result): per handler, the broker's
// share of raw's objects/s on create and on delete, and its CPU per object
// (broker and handler, create and delete together) against raw's.
var (
	shareGoal = map[string]float64{handlerGo: 0.95, handlerPython: 0.85}
	cpuGoal   = map[string]float64{handlerGo: 1.2, handlerPython: 2}
)

const goalWorkload = workload.Result

// phases of a scenario, in order.
var phases = []string{"create", "delete"}

// row is one line of the table.
type row struct {
	scenario string // scenarioBroker or scenarioRaw
	handler  string // the broker's handler; "" for raw
	workload string
	n        int
	round    int
	phase    string
	seconds  float64
	writes   delta
	// cpuParts is the CPU time of each of the controller's processes in
	// the phase, the controller's first, as mem.
	cpuParts []time.Duration
	mem      []memPeak // per process, the controller's first
	// steal is the machine's CPU steal over the phase, in percent (stealOK
	// false when /proc/stat could not be read); load its load average at
	// the end (loadAverage).
	steal   float64
	stealOK bool
	load    string
}

func (r row) rate() float64 { return float64(r.n) / r.seconds }

// cpuPerObject is the controller's CPU time per object, in milliseconds.
// cpu is the CPU time of all the controller's processes in the phase.
func (r row) cpu() time.Duration {
	var sum time.Duration
	for _, c := range r.cpuParts {
		sum += c
	}
	return sum
}

func (r row) cpuPerObject() float64 {
	return float64(r.cpu()) / float64(time.Millisecond) / float64(r.n)
}

// cpuText is cpuPerObject with, for a broker case, its parts: "1.61
// (broker 0.70, handler 0.91)".
func (r row) cpuText() string {
	s := fmt.Sprintf("%.2f", r.cpuPerObject())
	if len(r.cpuParts) < 2 || len(r.cpuParts) != len(r.mem) {
		return s
	}
	parts := make([]string, len(r.cpuParts))
	for i, c := range r.cpuParts {
		parts[i] = fmt.Sprintf("%s %.2f", r.mem[i].role, float64(c)/float64(time.Millisecond)/float64(r.n))
	}
	return s + " (" + strings.Join(parts, ", ") + ")"
}

func (r row) stealText() string {
	if !r.stealOK {
		return "?"
	}
	return fmt.Sprintf("%.1f%%", r.steal)
}

// who is the row's controller: "broker go", "raw".
func (r row) who() string { return strings.TrimSpace(r.scenario + " " + r.handler) }

// report writes the table and the verdicts; it reports whether every goal
// was met.
func report(w io.Writer, cfg *config, rows []row) bool {
	fmt.Fprintf(w, "Tether create/delete benchmark: kube-apiserver %s, %d CPUs, %s, client QPS %g burst %d, handler window %d, raw workers %d, %d rounds; workloads %s; handlers %s\n\n",
		controlplane.KubernetesVersion, runtime.NumCPU(), runtime.Version(), cfg.qps, cfg.burst, cfg.window, cfg.rawWorkers, cfg.pairs,
		strings.Join(cfg.workloads, ", "), handlersDesc(cfg))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\tworkload\tN\tround\tphase\tseconds\tobjects/s\twrites/object (controller)\trefused/object\tevents/object\tCPU ms/object\tpeak RSS MiB (private)\tCPU steal\tload average")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.2f\t%.1f\t%s\t%.2f\t%.2f\t%s\t%s\t%s\t%s\n",
			r.who(), r.workload, r.n, r.round, r.phase, r.seconds, r.rate(), r.writes.verbs(), r.writes.refused, r.writes.events,
			r.cpuText(), formatMemory(r.mem), r.stealText(), r.load)
	}
	tw.Flush()
	fmt.Fprintln(w)
	ok := true
	for _, n := range cfg.counts {
		machineLine(w, rows, n)
		for _, work := range cfg.workloads {
			for _, h := range cfg.handlers {
				ok = caseVerdict(w, cfg, rows, n, work, h) && ok
			}
		}
	}
	var goals []string
	for _, h := range cfg.handlers {
		if _, hasGoal := shareGoal[h]; hasGoal {
			goals = append(goals, fmt.Sprintf("%s >= %.0f%% of raw's objects/s on create and delete, CPU/object <= %.1fx raw's", h, 100*shareGoal[h], cpuGoal[h]))
		}
	}
	fmt.Fprintf(w, "\nGoals (%s workload: %s; every workload: raw's writes/object on create in every round): %s\n",
		goalWorkload, strings.Join(goals, "; "), passFail(ok))
	return ok
}

// handlersDesc names the handlers of the run and what runs them.
func handlersDesc(cfg *config) string {
	var out []string
	for _, h := range cfg.handlers {
		if h == handlerPython {
			out = append(out, fmt.Sprintf("python (%s, plain functions; %s)", benchHandlerPy, cfg.pythonVersion))
			continue
		}
		if h == handlerGoTraced {
			out = append(out, h+" (test/bench/handler; broker and handler send every span over OTLP to Jaeger, 100 % sampled)")
			continue
		}
		if h == handlerGoBaseline {
			out = append(out, h+" (test/bench/handler under the broker of -baseline "+cfg.baseline+")")
			continue
		}
		if h == handlerPythonBaseline {
			out = append(out, h+" (the handler.py and Python SDK of -baseline "+cfg.baseline+", under its broker)")
			continue
		}
		out = append(out, h+" (test/bench/handler)")
	}
	return strings.Join(out, ", ")
}

// machineLine says how busy the machine was during the phases of count n:
// the median CPU steal and one-minute load average, with their ranges.
func machineLine(w io.Writer, rows []row, n int) {
	var steal, load []float64
	for _, r := range rows {
		if r.n != n {
			continue
		}
		if r.stealOK {
			steal = append(steal, r.steal)
		}
		if l, ok := load1(r.load); ok {
			load = append(load, l)
		}
	}
	line := fmt.Sprintf("N=%d machine over %d phases:", n, len(rows))
	if len(steal) > 0 {
		line += fmt.Sprintf(" CPU steal %.1f%% [%.1f-%.1f%%];", median(steal), slices.Min(steal), slices.Max(steal))
	}
	if len(load) > 0 {
		line += fmt.Sprintf(" load average (1 min) at their ends %.2f [%.2f-%.2f]", median(load), slices.Min(load), slices.Max(load))
	}
	fmt.Fprintln(w, strings.TrimSuffix(line, ";"))
}

// findRow is the row of one case, count, round and phase, or nil.
func findRow(rows []row, cs benchCase, n, round int, phase string) *row {
	for i := range rows {
		r := &rows[i]
		if r.scenario == cs.scenario && r.handler == cs.handler && r.workload == cs.workload && r.n == n && r.round == round && r.phase == phase {
			return r
		}
	}
	return nil
}

// caseVerdict writes the lines comparing the broker with handler h to raw
// on workload work at count n, each round against the raw run of the same
// round; it reports whether the goals that apply were met.
func caseVerdict(w io.Writer, cfg *config, rows []row, n int, work, h string) bool {
	_, hasGoal := shareGoal[h]
	judged := work == goalWorkload && hasGoal
	broker, rawCase := benchCase{scenarioBroker, h, work}, benchCase{scenario: scenarioRaw, workload: work}
	prefix := fmt.Sprintf("N=%d %s %s", n, work, h)
	ok := true
	for _, phase := range phases {
		var shares, bRates, rRates, bWrites, rWrites []float64
		for round := 1; round <= cfg.rounds(n); round++ {
			b, r := findRow(rows, broker, n, round, phase), findRow(rows, rawCase, n, round, phase)
			if b == nil || r == nil {
				continue
			}
			shares = append(shares, b.rate()/r.rate())
			bRates, rRates = append(bRates, b.rate()), append(rRates, r.rate())
			bWrites, rWrites = append(bWrites, b.writes.controller/float64(n)), append(rWrites, r.writes.controller/float64(n))
		}
		if len(shares) == 0 {
			continue
		}
		share := median(shares)
		line := fmt.Sprintf("%s %s: broker %.1f objects/s = %.0f%% of raw %.1f objects/s, median of %s %s, spread %.0f points",
			prefix, phase, median(bRates), 100*share, median(rRates), roundsText(len(shares)), spread(shares, 100), spreadPoints(shares))
		if judged {
			pass := share >= shareGoal[h]
			ok = ok && pass
			line += fmt.Sprintf(" (goal >= %.0f%%): %s", 100*shareGoal[h], passFail(pass))
		}
		fmt.Fprintln(w, line)
		line = fmt.Sprintf("%s %s: writes/object broker %.2f %s, raw %.2f %s", prefix, phase, median(bWrites), spread(bWrites, 1), median(rWrites), spread(rWrites, 1))
		if phase == "create" {
			want := writesPerObject[work]
			pass := slices.Min(bWrites) == want && slices.Max(bWrites) == want
			ok = ok && pass
			line += fmt.Sprintf(" (goal %g in every round): %s", want, passFail(pass))
		}
		fmt.Fprintln(w, line)
	}
	return cpuVerdict(w, cfg, rows, n, broker, rawCase, prefix) && ok
}

// cpuVerdict writes the CPU per object of the broker case against raw's,
// create and delete together, and judges it on the goal workload.
func cpuVerdict(w io.Writer, cfg *config, rows []row, n int, broker, rawCase benchCase, prefix string) bool {
	var bCPU, rCPU, ratios []float64
	for round := 1; round <= cfg.rounds(n); round++ {
		var b, r time.Duration
		complete := true
		for _, phase := range phases {
			br, rr := findRow(rows, broker, n, round, phase), findRow(rows, rawCase, n, round, phase)
			if br == nil || rr == nil {
				complete = false
				break
			}
			b, r = b+br.cpu(), r+rr.cpu()
		}
		if !complete || r == 0 {
			continue
		}
		perObject := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(n) }
		bCPU, rCPU = append(bCPU, perObject(b)), append(rCPU, perObject(r))
		ratios = append(ratios, float64(b)/float64(r))
	}
	if len(ratios) == 0 {
		return true
	}
	ratio := median(ratios)
	line := fmt.Sprintf("%s: CPU ms/object (create and delete) broker+handler %.2f %s, raw %.2f %s: %.2fx raw %s, median of %s",
		prefix, median(bCPU), spread(bCPU, 1), median(rCPU), spread(rCPU, 1), ratio, spread(ratios, 1), roundsText(len(ratios)))
	if _, hasGoal := cpuGoal[broker.handler]; broker.workload != goalWorkload || !hasGoal {
		fmt.Fprintln(w, line)
		return true
	}
	pass := ratio <= cpuGoal[broker.handler]
	fmt.Fprintf(w, "%s (goal <= %.1fx): %s\n", line, cpuGoal[broker.handler], passFail(pass))
	return pass
}

// median of xs, which must not be empty.
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// spread is the range of xs scaled by k, "[lo-hi]".
func spread(xs []float64, k float64) string {
	if k == 1 {
		return fmt.Sprintf("[%.2f-%.2f]", slices.Min(xs), slices.Max(xs))
	}
	return fmt.Sprintf("[%.0f-%.0f%%]", k*slices.Min(xs), k*slices.Max(xs))
}

// spreadPoints is the width of the range of shares xs in percentage
// points, rounded to the nearest point.
func spreadPoints(xs []float64) float64 {
	return math.Round(100 * (slices.Max(xs) - slices.Min(xs)))
}

// roundsText is "1 round", "3 rounds".
func roundsText(k int) string {
	if k == 1 {
		return "1 round"
	}
	return fmt.Sprintf("%d rounds", k)
}

func passFail(ok bool) string {
	if ok {
		return "PASS"
	}
	return "FAIL"
}
