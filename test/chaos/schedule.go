package chaos

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Planned is one fault of a schedule: what, where, when (after the load
// starts) and for how long.
type Planned struct {
	After  time.Duration
	Kind   FaultKind
	Target string
	// For is how long the fault lasts before it is healed: a process
	// restarted or continued, a toxic removed. Zero for faults that heal
	// by themselves (an API server or etcd restart, a reset).
	For time.Duration
	// Latency is the delay of a net-latency fault.
	Latency time.Duration
}

func (p Planned) String() string {
	s := fmt.Sprintf("+%v %s %s", p.After.Round(time.Millisecond), p.Kind, p.Target)
	if p.For > 0 {
		s += fmt.Sprintf(" for %v", p.For.Round(time.Millisecond))
	}
	if p.Latency > 0 {
		s += fmt.Sprintf(" (%v)", p.Latency)
	}
	return s
}

// Topology names what faults can hit.
type Topology struct {
	Handlers []string // handler instances
	// Links are the network paths through toxiproxy.
	Links []string
}

// weights say how often each kind of fault is drawn.
var weights = []struct {
	kind   FaultKind
	weight int
}{
	{FaultHandlerKill, 4},
	{FaultHandlerStop, 3},
	{FaultLeaderKill, 2},
	{FaultLeaderStop, 1},
	{FaultAPIRestart, 1},
	{FaultEtcdRestart, 1},
	{FaultEtcdCompact, 1},
	{FaultNetLatency, 3},
	{FaultNetReset, 2},
	{FaultNetBlackhole, 2},
	{FaultHandlerRollout, 1},
}

// Gaps bound the quiet time between two faults.
const (
	minGap = 2 * time.Second
	maxGap = 8 * time.Second
)

// Plan draws the fault schedule of a run from seed: one fault after
// another, with a random gap between the end of one and the start of the
// next, until duration. The same seed, duration, grace and topology give
// the same plan, which is what makes a failing seed reproducible.
func Plan(seed int64, duration, grace time.Duration, top Topology) []Planned {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x7e7e))
	total := 0
	for _, w := range weights {
		total += w.weight
	}
	between := func(lo, hi time.Duration) time.Duration {
		return lo + time.Duration(rng.Int64N(int64(hi-lo)+1))
	}
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	var plan []Planned
	for at := between(minGap, maxGap); at < duration; {
		n := rng.IntN(total)
		var kind FaultKind
		for _, w := range weights {
			if n < w.weight {
				kind = w.kind
				break
			}
			n -= w.weight
		}
		p := Planned{After: at, Kind: kind}
		switch kind {
		case FaultHandlerKill, FaultHandlerStop:
			// Sometimes past the grace, so that rule 3c is played too.
			p.Target, p.For = pick(top.Handlers), between(500*time.Millisecond, grace+grace/2)
		case FaultLeaderKill:
			p.Target, p.For = "leader", between(500*time.Millisecond, 3*time.Second)
		case FaultLeaderStop:
			// Sometimes past the lease (3 s), so that the follower takes
			// over a leader that is frozen, not dead, and the leader,
			// let go on, finds it lost the Lease.
			p.Target, p.For = "leader", between(500*time.Millisecond, 6*time.Second)
		case FaultAPIRestart:
			p.Target = "kube-apiserver"
		case FaultEtcdRestart, FaultEtcdCompact:
			p.Target = "etcd"
		case FaultNetLatency:
			p.Target, p.For, p.Latency = pick(top.Links), between(time.Second, 6*time.Second), between(100*time.Millisecond, 1500*time.Millisecond)
		case FaultNetReset:
			p.Target = pick(top.Links)
		case FaultNetBlackhole:
			p.Target, p.For = pick(top.Links), between(time.Second, 5*time.Second)
		case FaultHandlerRollout:
			p.Target = "handlers"
		}
		plan = append(plan, p)
		at += p.For + between(minGap, maxGap)
	}
	return plan
}
