package main

import (
	"io"
	"slices"
	"testing"
)

// TestBaselineAddsItsCase: -baseline DIR adds the go-baseline case; the
// case without a tree, or a tree that is not Tether's, is refused.
func TestBaselineAddsItsCase(t *testing.T) {
	c, err := parseFlags([]string{"-broker-only", "-baseline", "../.."}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.handlers, []string{handlerGo, handlerGoBaseline}) {
		t.Errorf("handlers %v, want go and go-baseline", c.handlers)
	}
	for _, bad := range [][]string{
		{"-handler", "go,go-baseline"},
		{"-baseline", t.TempDir()},
		{"-baseline", "../..", "-timers"},
	} {
		if _, err := parseFlags(bad, io.Discard); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}
