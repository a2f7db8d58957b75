package main

import (
	"io"
	"slices"
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
