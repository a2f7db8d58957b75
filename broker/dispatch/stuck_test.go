package dispatch

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/metrics"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestTheStuckScanSaysWhyOncePerReason: a STRICT hold on a widget being
// deleted is stuck once it stays past StuckAfter; the scan posts one
// HoldStuck Event per reason (the handler working on it, then retrying,
// then absent), records it for the Lease with WhyHeld's words, and samples
// the gauges.
func TestTheStuckScanSaysWhyOncePerReason(t *testing.T) {
	d := bind("d", binding.Delete, binding.PolicyStrict)
	p := newPassTest(t, d)
	p.h.opts.StuckAfter = 2 * time.Second
	m := metrics.New(nil)
	p.h.opts.Metrics = m
	o := p.see(deleting(held(sized("1", 1, "red"))), watchModified, false)
	s := &stuckScan{handler: p.h}
	stuckEvents := func() int {
		return len(slices.DeleteFunc(slices.Clone(p.events.reasons), func(r string) bool { return r != "HoldStuck" }))
	}
	gauge := func(name string) float64 {
		t.Helper()
		n, err := testutil.GatherAndCount(m.Gatherer(), name)
		if err != nil || n != 1 {
			t.Fatalf("%s: %d series (%v)", name, n, err)
		}
		fs, _ := m.Gatherer().Gather()
		for _, f := range fs {
			if f.GetName() == name {
				return f.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return -1
	}

	p.clk.SetTime(passStart.Add(time.Second))
	s.scan()
	if stuckEvents() != 0 || s.stuck().Total != 0 {
		t.Fatalf("stuck after 1s of a 2s --stuck-after: %v, %+v", p.events.reasons, s.stuck())
	}
	if got := gauge("tether_hold_stuck_seconds"); got != 1 {
		t.Errorf("stuck for %v, want 1", got)
	}
	if got := gauge("tether_objects_held"); got != 1 {
		t.Errorf("objects held %v, want 1", got)
	}

	steps := []struct {
		name   string
		before func()
		reason contract.StayReason
		words  string
		events int
	}{
		{"working", func() { p.clk.SetTime(passStart.Add(3 * time.Second)) }, contract.StayWorking, "binding d has not answered", 1},
		{"the same reason again", func() {}, contract.StayWorking, "binding d has not answered", 1},
		{"retrying", func() { noteRetry(o, d, 2, "busy") }, contract.StayRetrying, "retrying (binding d, attempt 2, last message: busy)", 2},
		{"a later attempt, the same reason", func() { noteRetry(o, d, 3, "busy") }, contract.StayRetrying, "attempt 3", 2},
		{"absent", func() { p.absent(false); p.clk.SetTime(passStart.Add(4 * time.Second)) }, contract.StayStrictAbsent, "STRICT binding d with the handler absent", 3},
	}
	for _, st := range steps {
		st.before()
		s.scan()
		rec := s.stuck()
		if rec.Total != 1 || len(rec.Objects) != 1 {
			t.Fatalf("%s: recorded %+v, want one object", st.name, rec)
		}
		got := rec.Objects[0]
		if got.Reason != string(st.reason) || !strings.Contains(got.Why, st.words) || got.Name != "w" || got.Resource != "widgets.test.tether.dev" {
			t.Errorf("%s: recorded %+v, want reason %s saying %q", st.name, got, st.reason, st.words)
		}
		if n := stuckEvents(); n != st.events {
			t.Errorf("%s: %d HoldStuck Events, want %d", st.name, n, st.events)
		}
		if got := gauge("tether_holds_stuck"); got != 1 {
			t.Errorf("%s: holds stuck %v, want 1", st.name, got)
		}
	}
}

// TestAnOKAckCostsNoAllocation: judging an OK ack, the common case, looks
// at the stay note and allocates nothing.
func TestAnOKAckCostsNoAllocation(t *testing.T) {
	c := bind("c", binding.Create, binding.PolicyHold)
	p := newPassTest(t, c)
	o := p.see(sized("1", 1, "red"), watchAdded, false)
	p.begin(o)
	dl := &deliverer{handler: p.h}
	ack := &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK}
	if n := testing.AllocsPerRun(1000, func() { dl.judge(o, c, ack, 1, instanceA) }); n != 0 {
		t.Errorf("%v allocations per OK ack, want 0", n)
	}
}
