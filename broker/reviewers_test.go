package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

func TestWaitingForNamesTheHandlersWithoutAnInstanceHere(t *testing.T) {
	here := map[string]bool{"a": true}
	connected := func(h string) bool { return here[h] }
	for _, tc := range []struct {
		name string
		read bool
		want []string
		out  string
	}{
		{"before the list is read", false, nil, "the list of handlers that answer reviews on every replica"},
		{"no handler on every replica", true, nil, ""},
		{"each one here", true, []string{"a"}, ""},
		{"some missing", true, []string{"a", "b", "c"}, "handler b, handler c"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := waitingFor(tc.read, tc.want, connected); got != tc.out {
				t.Errorf("waitingFor = %q, want %q", got, tc.out)
			}
		})
	}
}

// gateAt is a gate waiting 10 s from a clock the test moves.
func gateAt(now *time.Time, here map[string]bool) *reviewersGate {
	return newReviewersGate(10*time.Second, func(h string) bool { return here[h] }, func() time.Time { return *now }, hclog.NewNullLogger())
}

func listing(names ...string) func(context.Context) ([]string, error) {
	return func(context.Context) ([]string, error) { return names, nil }
}

func TestAStartingReplicaIsReadyOnceEachHandlerOnEveryReplicaIsHere(t *testing.T) {
	now := time.Unix(0, 0)
	here := map[string]bool{}
	g := gateAt(&now, here)
	if why := g.notReady(); !strings.Contains(why, "the list of handlers") {
		t.Fatalf("before the list is read, notReady = %q", why)
	}
	g.readWanted(t.Context(), listing("a", "b"))
	here["a"] = true
	now = now.Add(3 * time.Second)
	if why := g.notReady(); !strings.Contains(why, "handler b") || strings.Contains(why, "handler a") {
		t.Fatalf("with a here and not b, notReady = %q", why)
	}
	here["b"] = true
	if why := g.notReady(); why != "" {
		t.Fatalf("with each here, notReady = %q", why)
	}
	// Once ready it stays so: an instance leaving later is a matter for
	// the reviews' own wait, not for the Service's endpoints.
	delete(here, "a")
	if why := g.notReady(); why != "" {
		t.Errorf("an instance leaving after the replica was ready made it not ready: %q", why)
	}
}

func TestAStartingReplicaIsReadyAfterTheWaitWhateverIsMissing(t *testing.T) {
	now := time.Unix(0, 0)
	g := gateAt(&now, map[string]bool{})
	g.readWanted(t.Context(), listing("gone"))
	now = now.Add(9 * time.Second)
	if why := g.notReady(); why == "" {
		t.Fatal("ready before the wait ended, with the handler missing")
	}
	now = now.Add(time.Second)
	if why := g.notReady(); why != "" {
		t.Errorf("still not ready once the wait ended: %q", why)
	}
}

func TestAStartingReplicaThatCannotReadTheListIsReady(t *testing.T) {
	now := time.Unix(0, 0)
	g := gateAt(&now, map[string]bool{})
	g.readWanted(t.Context(), func(context.Context) ([]string, error) { return nil, errors.New("forbidden") })
	if why := g.notReady(); why != "" {
		t.Errorf("notReady = %q after the list failed, want ready", why)
	}
}

func TestNoGateIsReady(t *testing.T) {
	var g *reviewersGate
	if why := g.notReady(); why != "" {
		t.Errorf("a nil gate says %q", why)
	}
}
