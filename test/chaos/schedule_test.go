package chaos

import (
	"slices"
	"testing"
	"time"
)

var topology = Topology{
	Handlers: []string{"handler-1", "handler-2", "handler-3"},
	Links:    []string{"broker-a->apiserver", "broker-b->apiserver", "handlers->broker-a", "handlers->broker-b"},
}

// TestPlanIsTheSeeds: the same seed gives the same faults, which is what
// makes `make chaos SEED=N` reproduce a run; another seed gives others.
func TestPlanIsTheSeeds(t *testing.T) {
	a := Plan(7, 10*time.Minute, 5*time.Second, topology)
	if b := Plan(7, 10*time.Minute, 5*time.Second, topology); !slices.Equal(a, b) {
		t.Fatal("seed 7 planned twice gives two plans")
	}
	if c := Plan(8, 10*time.Minute, 5*time.Second, topology); slices.Equal(a, c) {
		t.Fatal("seeds 7 and 8 give the same plan")
	}
}

// TestPlanDrawsEveryKindAndKeepsFaultsApart: a long plan has every kind of
// fault, each on a target of the topology, one after the other with a gap,
// and none past the duration.
func TestPlanDrawsEveryKindAndKeepsFaultsApart(t *testing.T) {
	const duration = 30 * time.Minute
	plan := Plan(1, duration, 5*time.Second, topology)
	kinds := map[FaultKind]int{}
	var end time.Duration
	for i, p := range plan {
		kinds[p.Kind]++
		if p.After >= duration {
			t.Errorf("fault %d (%s) after the duration", i, p)
		}
		if p.After < end+minGap {
			t.Errorf("fault %d (%s) starts %v after the one before ended, want at least %v", i, p, p.After-end, minGap)
		}
		end = p.After + p.For
		switch p.Kind {
		case FaultHandlerKill, FaultHandlerStop:
			if !slices.Contains(topology.Handlers, p.Target) {
				t.Errorf("fault %d (%s) on no handler", i, p)
			}
		case FaultNetLatency, FaultNetReset, FaultNetBlackhole:
			if !slices.Contains(topology.Links, p.Target) {
				t.Errorf("fault %d (%s) on no link", i, p)
			}
		case FaultEtcdRestart, FaultEtcdCompact:
			if p.Target != "etcd" || p.For != 0 {
				t.Errorf("fault %d (%s): want on etcd, healing by itself", i, p)
			}
		}
	}
	for _, w := range weights {
		if kinds[w.kind] == 0 {
			t.Errorf("no %s fault in %d", w.kind, len(plan))
		}
	}
	t.Logf("%d faults in %v: %v", len(plan), duration, kinds)
}
