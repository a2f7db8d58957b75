package main

import (
	"strings"
	"testing"
	"time"

	"github.com/tether-dev/tether/broker/presence"
)

// status prints the recorded words, and says no broker leads when the
// Lease of a present handler is not renewed.
func TestPrintStuck(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	r := presence.Record{Handler: "h", Instances: 1, LastSeen: now, Stuck: presence.Stuck{Total: 21, Objects: []presence.StuckObject{{
		Resource: "widgets.test.tether.dev", Namespace: "ns", Name: "w", Since: now.Add(-3 * time.Minute), Why: "handler present and retrying (binding d, attempt 2, last message: no)",
	}}}}
	var b strings.Builder
	printStuck(&b, r, now)
	for _, want := range []string{"handler h holds 21 object(s)", "widgets.test.tether.dev ns/w stuck for 3m0s: handler present and retrying (binding d, attempt 2", "and 20 more"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	printStuck(&b, r, now.Add(time.Minute))
	if !strings.Contains(b.String(), "broker not leading") {
		t.Errorf("a stale Lease's stuck object does not say no broker leads:\n%s", b.String())
	}
	b.Reset()
	printStuck(&b, presence.Record{Handler: "h"}, now)
	if b.Len() != 0 {
		t.Errorf("nothing stuck printed %q", b.String())
	}
}
