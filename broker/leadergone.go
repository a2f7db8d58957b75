package broker

import (
	"encoding/json"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// An early takeover: a follower takes the leader Lease before it expires
// only when it knows the leader's process is dead. The evidence is a port
// the leading process listens on for as long as it lives (its liveness
// listener, never closed while it may write) refusing connections: nothing
// listens there any more, so the process that published it has exited. The
// leader publishes the address on the Lease in LivenessAnnotation, tied to
// its tenure (its identity and the Lease's transition count), so that a
// mark left by a dead leader never speaks for the next one.
//
// The follower then releases the Lease (released), conditional on the
// Lease it read, and the electors take it at their next try. Everything
// else is no evidence and waits for the lease: a timeout, an unreachable
// host or network (a partitioned node), an answer (a frozen process: the
// kernel still answers for it), and a refusal from an address this
// follower never saw answer (a wrong address refuses from the start).

// LivenessAnnotation on the leader Lease holds the leader's liveness mark.
const LivenessAnnotation = "tether.dev/leader-liveness"

// livenessMark is what the leader publishes: who holds the Lease, in which
// tenure, and where its process listens until it exits.
type livenessMark struct {
	Holder      string `json:"holder"`
	Transitions int32  `json:"transitions"`
	Address     string `json:"address"`
}

// markOf is the liveness mark of the Lease's current tenure; false when
// there is none, or the one there belongs to another tenure.
func markOf(lease *coordinationv1.Lease) (livenessMark, bool) {
	var m livenessMark
	if lease == nil || json.Unmarshal([]byte(lease.Annotations[LivenessAnnotation]), &m) != nil {
		return livenessMark{}, false
	}
	if m.Address == "" || m.Holder == "" || m.Holder != holderOf(lease) || m.Transitions != transitionsOf(lease) {
		return livenessMark{}, false
	}
	return m, true
}

// withMark is lease with its annotation set to m.
func withMark(lease *coordinationv1.Lease, m livenessMark) *coordinationv1.Lease {
	out := lease.DeepCopy()
	raw, _ := json.Marshal(m)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	out.Annotations[LivenessAnnotation] = string(raw)
	return out
}

// withoutMark is lease without a liveness mark.
func withoutMark(lease *coordinationv1.Lease) *coordinationv1.Lease {
	out := lease.DeepCopy()
	delete(out.Annotations, LivenessAnnotation)
	return out
}

// probeOutcome is what a connection to the leader's liveness address said.
type probeOutcome int

const (
	// probeUnknown: a timeout, an unreachable host or network, any error
	// but a refusal. Not evidence either way.
	probeUnknown probeOutcome = iota
	// probeAnswered: something listens there.
	probeAnswered
	// probeRefused: nothing listens there (connection refused).
	probeRefused
)

// takeoverInput is what a follower knows when it decides.
type takeoverInput struct {
	Lease *coordinationv1.Lease
	Self  string
	// AnsweredBefore: this follower saw the mark's address answer during
	// the same tenure, so the address reaches the leader's process.
	AnsweredBefore bool
	// Probes are the probes of the mark's address made after Lease was
	// read, in order.
	Probes []probeOutcome
	Now    time.Time
}

// Reasons of decideTakeover's verdicts, as the follower logs them.
const (
	reasonNoHolder     = "the Lease has no holder"
	reasonSelf         = "this replica holds the Lease"
	reasonExpired      = "the Lease expired: the elector takes it"
	reasonNoMark       = "the holder published no liveness address for its tenure"
	reasonNeverAnswer  = "the liveness address never answered this replica"
	reasonAlive        = "the holder's process may be alive"
	reasonProcessGone  = "the holder's liveness address refuses connections: its process exited"
	minRefusalsToTrust = 2
)

// decideTakeover says whether a follower may take the Lease from its
// holder now, and why. It does only when every probe since the Lease was
// read was refused (at least minRefusalsToTrust of them), the address
// answered before in the same tenure, and the Lease has not expired (the
// elector then takes it by itself).
func decideTakeover(in takeoverInput) (bool, string) {
	holder := holderOf(in.Lease)
	switch {
	case holder == "":
		return false, reasonNoHolder
	case holder == in.Self:
		return false, reasonSelf
	case expired(in.Lease, in.Now):
		return false, reasonExpired
	}
	if _, ok := markOf(in.Lease); !ok {
		return false, reasonNoMark
	}
	if !in.AnsweredBefore {
		return false, reasonNeverAnswer
	}
	if len(in.Probes) < minRefusalsToTrust {
		return false, reasonAlive
	}
	for _, p := range in.Probes {
		if p != probeRefused {
			return false, reasonAlive
		}
	}
	return true, reasonProcessGone
}

// released is lease as the elector (as client-go's) leaves it when its holder
// releases it on the way out: no holder, a one-second lease, and no
// liveness mark. Written with the resourceVersion it was read with, it
// fails if the holder renewed since.
func released(lease *coordinationv1.Lease, now time.Time) *coordinationv1.Lease {
	out := withoutMark(lease)
	none, one := "", int32(1)
	t := metav1.NewMicroTime(now)
	out.Spec.HolderIdentity, out.Spec.LeaseDurationSeconds = &none, &one
	out.Spec.AcquireTime, out.Spec.RenewTime = &t, &t
	return out
}

func holderOf(lease *coordinationv1.Lease) string {
	if lease == nil || lease.Spec.HolderIdentity == nil {
		return ""
	}
	return *lease.Spec.HolderIdentity
}

func transitionsOf(lease *coordinationv1.Lease) int32 {
	if lease.Spec.LeaseTransitions == nil {
		return 0
	}
	return *lease.Spec.LeaseTransitions
}

// expired: the Lease was last renewed longer than its duration ago.
func expired(lease *coordinationv1.Lease, now time.Time) bool {
	if lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second))
}
