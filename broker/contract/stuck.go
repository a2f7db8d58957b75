package contract

import (
	"fmt"
	"time"
)

// DefaultStuckAfter is how long a hold may stay on an object being deleted
// before the broker calls it stuck (--stuck-after): a HoldStuck Event, a
// line in `broker status`, tether_hold_stuck_seconds past it.
const DefaultStuckAfter = 5 * time.Minute

// Stay is what is known of a hold that stays on an object being deleted:
// the inputs of WhyHeld.
type Stay struct {
	// Leading: a broker leads and acts on the hold.
	Leading bool
	// Presence is the handler's.
	Presence Presence
	// Policy is the strongest of the bindings that hold the object.
	Policy Policy
	// Binding is the delete binding the hold waits for: the one retrying,
	// else the STRICT one, else the first not yet answered ("" unknown).
	Binding string
	// Attempt and Message are the binding's last failed attempt (0: none).
	Attempt int
	Message string
	// Refused is why the API server refused the broker's last write to the
	// object ("" none).
	Refused string
}

// StayReason names why a hold stays, in the HoldStuck Event's key and in
// `broker status`.
type StayReason string

const (
	StayNotLeading   StayReason = "not-leading"
	StayWriteRefused StayReason = "write-refused"
	StayRetrying     StayReason = "retrying"
	StayStrictAbsent StayReason = "strict-absent"
	StayInGrace      StayReason = "in-grace"
	StayWorking      StayReason = "working"
)

// WhyHeld says why the hold on an object being deleted stays, as a reason
// and in the words the HoldStuck Event and `broker status` both use.
func WhyHeld(s Stay) (StayReason, string) {
	b := s.Binding
	if b == "" {
		b = "?"
	}
	switch {
	case !s.Leading:
		return StayNotLeading, "broker not leading: no broker acts on the hold (is one running, and does it hold the leader Lease?)"
	case s.Refused != "":
		return StayWriteRefused, "write refused: the API server refuses the broker's write to the object: " + s.Refused
	case s.Policy == Strict && (s.Presence == Absent || s.Presence == LongAbsent):
		return StayStrictAbsent, fmt.Sprintf("STRICT binding %s with the handler absent: only its answer, or broker release --handler, releases the hold", b)
	case s.Presence == InGrace:
		return StayInGrace, "handler absent within its grace: the hold stays until it returns or the grace runs out"
	case s.Attempt > 0:
		return StayRetrying, fmt.Sprintf("handler present and retrying (binding %s, attempt %d, last message: %s)", b, s.Attempt, s.Message)
	}
	return StayWorking, fmt.Sprintf("handler present, binding %s has not answered yet", b)
}
