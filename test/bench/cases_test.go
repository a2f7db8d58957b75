package main

import (
	"io"
	"slices"
	"strings"
	"testing"
)

// TestBaselineAddsItsCases: -baseline DIR adds the baseline twin of the go
// and python cases; a baseline case without a tree, or a tree that is not
// Tether's, is refused.
func TestBaselineAddsItsCases(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"-broker-only", "-baseline", "../.."}, []string{handlerGo, handlerGoBaseline}},
		{[]string{"-handler", "go,python", "-baseline", "../.."}, []string{handlerGo, handlerPython, handlerGoBaseline, handlerPythonBaseline}},
		{[]string{"-handler", "python", "-baseline", "../.."}, []string{handlerPython, handlerPythonBaseline}},
		{[]string{"-handler", "go-traced", "-baseline", "../.."}, []string{handlerGoTraced, handlerGoBaseline}},
	} {
		c, err := parseFlags(tc.args, io.Discard)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if !slices.Equal(c.handlers, tc.want) {
			t.Errorf("%v: handlers %v, want %v", tc.args, c.handlers, tc.want)
		}
	}
	for _, bad := range [][]string{
		{"-handler", "go,go-baseline"},
		{"-handler", "python-baseline"},
		{"-baseline", t.TempDir()},
		{"-baseline", "../..", "-timers"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

// TestWithSlicesTheCasesOfAWorkloadRunTogether: -slices groups a round's
// cases by workload, in their order; without it each case runs alone.
func TestWithSlicesTheCasesOfAWorkloadRunTogether(t *testing.T) {
	cases := roundCases([]string{"result", "label"}, []string{handlerGo, handlerPython}, false, 2)
	name := func(groups [][]benchCase) string {
		var out []string
		for _, g := range groups {
			var ids []string
			for _, cs := range g {
				ids = append(ids, cs.id())
			}
			out = append(out, "("+strings.Join(ids, " ")+")")
		}
		return strings.Join(out, " ")
	}
	if got, want := name(caseGroups(cases, true)),
		"(broker-python-label raw-label broker-go-label) (broker-python-result raw-result broker-go-result)"; got != want {
		t.Errorf("together: %s, want %s", got, want)
	}
	if got := caseGroups(cases, false); len(got) != len(cases) {
		t.Errorf("alone: %d groups of %d cases", len(got), len(cases))
	}
}

// TestSlicesTakeTurnsForwardThenBackward: the group's order at even
// slices, backwards at odd ones, the group itself untouched.
func TestSlicesTakeTurnsForwardThenBackward(t *testing.T) {
	runs := []string{"go", "raw", "python"}
	for s, want := range []string{"go raw python", "python raw go", "go raw python"} {
		if got := strings.Join(sliceOrder(runs, s), " "); got != want {
			t.Errorf("slice %d: %s, want %s", s, got, want)
		}
	}
	if strings.Join(runs, " ") != "go raw python" {
		t.Errorf("the group's order changed: %v", runs)
	}
}

// TestSlicesAreCheckedAgainstN: -slices must be positive, at most -n, and
// for the create/delete benchmark alone.
func TestSlicesAreCheckedAgainstN(t *testing.T) {
	for _, bad := range [][]string{{"-slices", "0"}, {"-n", "10", "-slices", "11"}, {"-slices", "4", "-timers"}, {"-slices", "4", "-failover"}} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
	if c, err := parseFlags([]string{"-n", "2000", "-slices", "4"}, io.Discard); err != nil || c.slices != 4 {
		t.Errorf("-slices 4: %v, %+v", err, c)
	}
}
