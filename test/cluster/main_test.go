package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestHelpDocumentsEveryFlag(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"-help"}, &out, &errOut); code != 0 {
		t.Fatalf("-help exited %d", code)
	}
	for _, f := range []string{"-build-only", "-kubeconfig", "-demo", "-log-level", "Ctrl-C"} {
		if !strings.Contains(errOut.String(), f) {
			t.Errorf("help lacks %s:\n%s", f, errOut.String())
		}
	}
}

func TestFlagsRejectBadInput(t *testing.T) {
	for _, args := range [][]string{
		{"--log-level", "loud"},
		{"--build-only", "--demo"},
		{"extra"},
		{"--no-such-flag"},
	} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code != 2 {
			t.Errorf("run(%q) exited %d, want 2 (stderr %q)", args, code, errOut.String())
		}
	}
}
