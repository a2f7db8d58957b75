package main

// The cases of the create/delete benchmark: the broker with a Go or a
// Python handler, or the raw controller, on one workload each (-workloads,
// -handler), run in turns within every round.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tether-dev/tether/test/bench/workload"
)

// The handlers of -handler: go and python are the same names as
// -timer-handler's; go-traced is go with tracing on in broker and handler.
const (
	handlerGo       = timerHandlerGo     // test/bench/handler
	handlerPython   = timerHandlerPython // test/bench/handler/handler.py
	handlerGoTraced = "go-traced"        // test/bench/handler, both sending every span to Jaeger
	// handlerGoBaseline is go under the broker built from -baseline: two
	// brokers compared in one run; handlerPythonBaseline is python, the
	// baseline tree's handler.py and SDK, under it: two SDKs too.
	handlerGoBaseline     = "go-baseline"
	handlerPythonBaseline = "python-baseline"
)

// The scenarios of a case.
const (
	scenarioBroker = "broker"
	scenarioRaw    = "raw"
)

// benchHandlerPy is the Python bench handler's script, from the repository
// root.
var benchHandlerPy = "test/bench/handler/handler.py"

// benchCase is one run of a round: a scenario on one workload, with the
// handler of the broker ("" for raw).
type benchCase struct{ scenario, handler, workload string }

// id names the case in namespaces and logs: broker-go-result, raw-label.
func (c benchCase) id() string {
	if c.handler == "" {
		return c.scenario + "-" + c.workload
	}
	return c.scenario + "-" + c.handler + "-" + c.workload
}

// roundCases are the cases of round (from 1), in the order they run: for
// each workload the broker with each handler and raw between them, so
// that raw runs next to every broker case it is compared with. Even rounds
// run the odd rounds' order backwards, so that no case always runs on a
// fresher API server or behind the same one's leftovers.
func roundCases(workloads, handlers []string, brokerOnly bool, round int) []benchCase {
	var cases []benchCase
	for _, w := range workloads {
		for i, h := range handlers {
			cases = append(cases, benchCase{scenarioBroker, h, w})
			if i == 0 && !brokerOnly {
				cases = append(cases, benchCase{scenario: scenarioRaw, workload: w})
			}
		}
	}
	if round%2 == 0 {
		slices.Reverse(cases)
	}
	return cases
}

// writesPerObject is what the raw controller writes on create for each
// workload, and so what the broker must: the hold with the result or the
// label in one guarded patch, and for status a status write besides (the
// status subresource takes status alone).
var writesPerObject = map[string]float64{workload.Result: 1, workload.Label: 1, workload.Status: 2}

// parseList splits a comma-separated flag value and checks every item.
func parseList(flagName, value string, check func(string) error) ([]string, error) {
	var out []string
	for f := range strings.SplitSeq(value, ",") {
		f = strings.TrimSpace(f)
		if err := check(f); err != nil {
			return nil, fmt.Errorf("-%s: %w", flagName, err)
		}
		if !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out, nil
}

func checkHandler(h string) error {
	if !slices.Contains(allHandlers, h) {
		return fmt.Errorf("handler %q is none of %s", h, strings.Join(allHandlers, ", "))
	}
	return nil
}

var allHandlers = []string{handlerGo, handlerPython, handlerGoTraced, handlerGoBaseline, handlerPythonBaseline}

// baselineOf is the case of the baseline tree's twin of handler h, "" for
// none.
var baselineOf = map[string]string{handlerGo: handlerGoBaseline, handlerPython: handlerPythonBaseline}

// isBaseline says whether handler h runs under the broker of -baseline.
func isBaseline(h string) bool { return h == handlerGoBaseline || h == handlerPythonBaseline }

// checkBaseline adds, when -baseline names a tree, the baseline twin of
// the go and python cases (go-baseline when there is neither), and refuses
// a baseline case without one.
func (c *config) checkBaseline() error {
	if c.baseline == "" {
		for _, h := range c.handlers {
			if isBaseline(h) {
				return fmt.Errorf("-handler %s needs -baseline", h)
			}
		}
		return nil
	}
	if c.timers || c.scale || c.pushdown || c.failover || c.profile != "" {
		return errors.New("-baseline is for the create/delete benchmark alone, without -profile")
	}
	abs, err := filepath.Abs(c.baseline)
	if err != nil {
		return fmt.Errorf("-baseline: %w", err)
	}
	if _, err := os.Stat(filepath.Join(abs, "cmd", "broker")); err != nil {
		return fmt.Errorf("-baseline: %s is not a source tree of Tether: %w", abs, err)
	}
	c.baseline = abs
	twins := []string{}
	for _, h := range c.handlers {
		if b := baselineOf[h]; b != "" {
			twins = append(twins, b)
		}
	}
	if len(twins) == 0 {
		twins = append(twins, handlerGoBaseline)
	}
	for _, b := range twins {
		if !slices.Contains(c.handlers, b) {
			c.handlers = append(c.handlers, b)
		}
	}
	return nil
}
