package main

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/test/bench/workload"
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

func TestSpreadPoints(t *testing.T) {
	for _, tc := range []struct {
		xs   []float64
		want float64
	}{{[]float64{0.9}, 0}, {[]float64{0.91, 1.04, 0.96}, 13}, {[]float64{0.5, 0.954}, 45}} {
		if got := spreadPoints(tc.xs); got != tc.want {
			t.Errorf("spreadPoints(%v) = %v, want %v", tc.xs, got, tc.want)
		}
	}
}

// rowsOf builds report rows: each call adds one case's create and delete
// rows for one round.
type rowsOf struct {
	n    int
	rows []row
}

func (r *rowsOf) add(cs benchCase, round int, create, del float64, writes float64, cpu time.Duration) {
	for _, p := range []struct {
		phase   string
		seconds float64
	}{{"create", create}, {"delete", del}} {
		r.rows = append(r.rows, row{scenario: cs.scenario, handler: cs.handler, workload: cs.workload, n: r.n, round: round,
			phase: p.phase, seconds: p.seconds, writes: delta{controller: writes * float64(r.n)}, cpuParts: []time.Duration{cpu},
			steal: float64(round), stealOK: true, load: "1.50 1.20 1.00"})
	}
}

var (
	goResult     = benchCase{scenarioBroker, handlerGo, workload.Result}
	pythonResult = benchCase{scenarioBroker, handlerPython, workload.Result}
	rawResult    = benchCase{scenario: scenarioRaw, workload: workload.Result}
	goStatus     = benchCase{scenarioBroker, handlerGo, workload.Status}
	rawStatus    = benchCase{scenario: scenarioRaw, workload: workload.Status}
)

func resultConfig(handlers ...string) *config {
	return &config{counts: []int{100}, pairs: 3, workloads: []string{workload.Result}, handlers: handlers}
}

// TestReportJudgesTheMedianRound: one slow round does not make the
// verdict, each round's share compares the runs of that round, and the
// line gives the range and its spread in points.
func TestReportJudgesTheMedianRound(t *testing.T) {
	rs := &rowsOf{n: 100}
	// Broker at 96%, 50% (a noisy round), 98% of raw.
	rs.add(goResult, 1, 1/0.96, 1, 1, 0)
	rs.add(rawResult, 1, 1, 1, 1, 0)
	rs.add(rawResult, 2, 1, 1, 1, 0)
	rs.add(goResult, 2, 2, 1, 1, 0)
	rs.add(goResult, 3, 1/0.98, 1, 1, 0)
	rs.add(rawResult, 3, 1, 1, 1, 0)
	var out strings.Builder
	if !report(&out, resultConfig(handlerGo), rs.rows) {
		t.Errorf("the verdict failed on a median share of 96%%:\n%s", out.String())
	}
	for _, want := range []string{
		"N=100 result go create: broker 96.0 objects/s = 96% of raw 100.0 objects/s, median of 3 rounds [50-98%], spread 48 points (goal >= 95%): PASS",
		"N=100 result go create: writes/object broker 1.00 [1.00-1.00], raw 1.00 [1.00-1.00] (goal 1 in every round): PASS",
		"N=100 result go delete: broker 100.0 objects/s = 100% of raw 100.0 objects/s, median of 3 rounds [100-100%], spread 0 points (goal >= 95%): PASS",
		"N=100 machine over 12 phases: CPU steal 2.0% [1.0-3.0%]; load average (1 min) at their ends 1.50 [1.50-1.50]",
		"CPU steal  load average", "peak RSS MiB (private)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
}

// TestReportGoalsByHandler: the result workload's goals are the handler's
// own (Go 95% of raw and 1.2x its CPU, Python 85% and 2x), and a missed one
// fails the run.
func TestReportGoalsByHandler(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cs      benchCase
		share   float64
		cpu     time.Duration // raw's is 100ms a phase
		wantOK  bool
		wantOut string
	}{
		{"go at 96%, 1.1x", goResult, 0.96, 110 * time.Millisecond, true, "(goal <= 1.2x): PASS"},
		{"go at 90%", goResult, 0.90, 100 * time.Millisecond, false, "(goal >= 95%): FAIL"},
		{"go at 1.3x CPU", goResult, 1, 130 * time.Millisecond, false, "1.30x raw [1.30-1.30], median of 3 rounds (goal <= 1.2x): FAIL"},
		{"python at 86%, 1.9x", pythonResult, 0.86, 190 * time.Millisecond, true, "N=100 result python create: broker 86.0 objects/s = 86% of raw"},
		{"python at 80%", pythonResult, 0.80, 100 * time.Millisecond, false, "(goal >= 85%): FAIL"},
		{"python at 2.1x CPU", pythonResult, 1, 210 * time.Millisecond, false, "(goal <= 2.0x): FAIL"},
	} {
		rs := &rowsOf{n: 100}
		for round := 1; round <= 3; round++ {
			rs.add(tc.cs, round, 1/tc.share, 1/tc.share, 1, tc.cpu)
			rs.add(rawResult, round, 1, 1, 1, 100*time.Millisecond)
		}
		var out strings.Builder
		if got := report(&out, resultConfig(tc.cs.handler), rs.rows); got != tc.wantOK || !strings.Contains(out.String(), tc.wantOut) {
			t.Errorf("%s: verdict %v, want %v, and %q in:\n%s", tc.name, got, tc.wantOK, tc.wantOut, out.String())
		}
	}
}

// TestReportOtherWorkloadsAreComparedNotJudged: on the status workload a
// slow broker is reported without a verdict on its share or CPU, but its
// writes per object must be raw's two (the hold's patch and the status
// write) in every round.
func TestReportOtherWorkloadsAreComparedNotJudged(t *testing.T) {
	cfg := &config{counts: []int{100}, pairs: 2, workloads: []string{workload.Status}, handlers: []string{handlerGo}}
	rs := &rowsOf{n: 100}
	for round := 1; round <= 2; round++ {
		rs.add(goStatus, round, 2, 2, 2, 300*time.Millisecond)
		rs.add(rawStatus, round, 1, 1, 2, 100*time.Millisecond)
	}
	var out strings.Builder
	if !report(&out, cfg, rs.rows) {
		t.Errorf("a workload without goals failed on share or CPU:\n%s", out.String())
	}
	for _, want := range []string{
		"N=100 status go create: broker 50.0 objects/s = 50% of raw 100.0 objects/s, median of 2 rounds [50-50%], spread 0 points\n",
		"N=100 status go create: writes/object broker 2.00 [2.00-2.00], raw 2.00 [2.00-2.00] (goal 2 in every round): PASS",
		"N=100 status go: CPU ms/object (create and delete) broker+handler 6.00 [6.00-6.00], raw 2.00 [2.00-2.00]: 3.00x raw [3.00-3.00], median of 2 rounds\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
	rs.rows[0].writes.controller = 150 // round 1: 1.5 writes per object
	out.Reset()
	if report(&out, cfg, rs.rows) || !strings.Contains(out.String(), "writes/object broker 1.75 [1.50-2.00], raw 2.00 [2.00-2.00] (goal 2 in every round): FAIL") {
		t.Errorf("a round with other than raw's writes per object passed:\n%s", out.String())
	}
}

// TestReportTableRows: the CPU column is per object, the memory column
// names every process after the controller's own, and each row has the
// machine's steal and load average of its phase.
func TestReportTableRows(t *testing.T) {
	brokerMem := []memPeak{{role: "broker", rss: 67.9, private: 31.2}, {role: "handler", rss: 21.2, private: 6.1}}
	rows := []row{
		{scenario: scenarioBroker, handler: handlerPython, workload: workload.Label, n: 200, round: 1, phase: "create", seconds: 1,
			writes: delta{controller: 200, perObject: map[string]float64{"PATCH": 1}}, cpuParts: []time.Duration{400 * time.Millisecond}, mem: brokerMem,
			steal: 4.25, stealOK: true, load: "1.95 1.20 0.80"},
		{scenario: scenarioRaw, workload: workload.Label, n: 200, round: 1, phase: "create", seconds: 1,
			writes: delta{controller: 200}, cpuParts: []time.Duration{100 * time.Millisecond}, mem: []memPeak{{role: "raw", rss: 25, private: 9.5}}, load: "?"},
	}
	cfg := &config{counts: []int{200}, pairs: 1, workloads: []string{workload.Label}, handlers: []string{handlerPython}, pythonVersion: "CPython 3.11.2"}
	var out strings.Builder
	report(&out, cfg, rows)
	var table []string
	for l := range strings.SplitSeq(out.String(), "\n") {
		table = append(table, strings.Join(strings.Fields(l), " "))
	}
	for _, want := range []string{
		"broker python label 200 1 create 1.00 200.0 PATCH 1.00 0.00 0.00 2.00 67.9 (31.2), handler 21.2 (6.1) 4.2% 1.95 1.20 0.80",
		"raw label 200 1 create 1.00 200.0 none 0.00 0.00 0.50 25.0 (9.5) ? ?",
	} {
		if !slices.Contains(table, want) {
			t.Errorf("no table row %q in:\n%s", want, out.String())
		}
	}
	if !strings.Contains(out.String(), "handlers python (test/bench/handler/handler.py, plain functions; CPython 3.11.2)") {
		t.Errorf("the first line does not describe the Python handler:\n%s", out.String())
	}
}

func TestRoundCasesRunInTurns(t *testing.T) {
	ids := func(cs []benchCase) string {
		var s []string
		for _, c := range cs {
			s = append(s, c.id())
		}
		return strings.Join(s, " ")
	}
	both := []string{handlerGo, handlerPython}
	for _, tc := range []struct {
		name       string
		workloads  []string
		handlers   []string
		brokerOnly bool
		round      int
		want       string
	}{
		{"odd round", []string{"result", "label"}, both, false, 1,
			"broker-go-result raw-result broker-python-result broker-go-label raw-label broker-python-label"},
		{"even round: backwards", []string{"result", "label"}, both, false, 2,
			"broker-python-label raw-label broker-go-label broker-python-result raw-result broker-go-result"},
		{"one handler", []string{"status"}, []string{handlerPython}, false, 1, "broker-python-status raw-status"},
		{"broker only", []string{"result"}, both, true, 2, "broker-python-result broker-go-result"},
	} {
		if got := ids(roundCases(tc.workloads, tc.handlers, tc.brokerOnly, tc.round)); got != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, got, tc.want)
		}
	}
}

func TestWorkloadAndHandlerFlags(t *testing.T) {
	var stderr strings.Builder
	c, err := parseFlags([]string{"-workloads", "result, status,result", "-handler", "python,go"}, &stderr)
	if err != nil || !slices.Equal(c.workloads, []string{"result", "status"}) || !slices.Equal(c.handlers, []string{"python", "go"}) {
		t.Fatalf("parseFlags = %+v, %v", c, err)
	}
	c, err = parseFlags(nil, &stderr)
	if err != nil || !slices.Equal(c.workloads, []string{"result"}) || !slices.Equal(c.handlers, []string{"go"}) {
		t.Fatalf("defaults: %+v, %v", c, err)
	}
	for _, args := range [][]string{
		{"-workloads", "result,spec"},
		{"-handler", "rust"},
		{"-scale", "-handler", "python"},
		{"-timers", "-workloads", "label"},
	} {
		if _, err := parseFlags(args, &stderr); err == nil {
			t.Errorf("parseFlags(%q): no error", args)
		}
	}
}

// TestReportOneRound: a run of one round says so, in the singular.
func TestReportOneRound(t *testing.T) {
	cfg := resultConfig(handlerGo)
	cfg.pairs = 1
	rs := &rowsOf{n: 100}
	rs.add(goResult, 1, 1, 1, 1, 100*time.Millisecond)
	rs.add(rawResult, 1, 1, 1, 1, 100*time.Millisecond)
	var out strings.Builder
	report(&out, cfg, rs.rows)
	for _, want := range []string{"= 100% of raw 100.0 objects/s, median of 1 round [100-100%], spread 0 points", "1.00x raw [1.00-1.00], median of 1 round (goal"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report does not say %q:\n%s", want, out.String())
		}
	}
}

func TestLoad1(t *testing.T) {
	if v, ok := load1("1.95 1.20 0.80"); !ok || math.Abs(v-1.95) > 1e-9 {
		t.Errorf("load1 = %v, %v", v, ok)
	}
	if _, ok := load1("?"); ok {
		t.Error("load1(?) is a number")
	}
}

// TestABrokerCasesCPUIsShownByProcess: a broker case's CPU per object is
// the sum with the broker's and the handler's parts; raw's is its own.
func TestABrokerCasesCPUIsShownByProcess(t *testing.T) {
	ms := time.Millisecond
	broker := row{n: 1000, cpuParts: []time.Duration{700 * ms, 910 * ms},
		mem: []memPeak{{role: "broker"}, {role: "handler"}}}
	if got, want := broker.cpuText(), "1.61 (broker 0.70, handler 0.91)"; got != want {
		t.Errorf("broker: %q, want %q", got, want)
	}
	raw := row{n: 1000, cpuParts: []time.Duration{610 * ms}, mem: []memPeak{{role: "raw"}}}
	if got, want := raw.cpuText(), "0.61"; got != want {
		t.Errorf("raw: %q, want %q", got, want)
	}
}
