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
	// brokers compared in one run.
	handlerGoBaseline = "go-baseline"
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
	if h != handlerGo && h != handlerPython && h != handlerGoTraced && h != handlerGoBaseline {
		return fmt.Errorf("handler %q is not %s, %s, %s or %s", h, handlerGo, handlerPython, handlerGoTraced, handlerGoBaseline)
	}
	return nil
}

// checkBaseline adds the go-baseline case when -baseline names a tree, and
// refuses the case without one.
func (c *config) checkBaseline() error {
	if c.baseline == "" {
		if slices.Contains(c.handlers, handlerGoBaseline) {
			return fmt.Errorf("-handler %s needs -baseline", handlerGoBaseline)
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
	if !slices.Contains(c.handlers, handlerGoBaseline) {
		c.handlers = append(c.handlers, handlerGoBaseline)
	}
	return nil
}
