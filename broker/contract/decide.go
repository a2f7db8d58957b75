package contract

// Policy is the strongest finalizer policy among a handler's bindings that
// match an object and hold it (rule 2).
type Policy int

const (
	// NoHold: no matching binding holds the object (create, update, event
	// bindings, optional deletes, finalizer NONE), or none matches.
	NoHold Policy = iota
	// Hold: released when the deletion work is done or the handler is absent.
	Hold
	// Strict: released only on the handler's acknowledgement or a
	// cancellation timeout; exempt from absence.
	Strict
)

func (p Policy) String() string {
	switch p {
	case NoHold:
		return "none"
	case Hold:
		return "hold"
	case Strict:
		return "strict"
	}
	return "unknown"
}

// Work is where the handler's deletion work on an object being deleted
// stands: its delete bindings, and stopping its daemons and timers.
type Work int

const (
	// Pending: some of it is still to be delivered or acknowledged.
	Pending Work = iota
	// Acked: the handler acknowledged all of it: every delete binding
	// answered OK or FAIL (failed permanently), every daemon acknowledged
	// stop (3a).
	Acked
	// GaveUp: the broker ended it without the handler's word (retries ran
	// out, or no ack came in time). That finishes HOLD work (it failed
	// permanently) but never STRICT work, which is tried again.
	GaveUp
	// TimedOut: a daemon did not acknowledge stop within its cancellation
	// timeout (3b).
	TimedOut
)

// Object is what is known of one object for one handler.
type Object struct {
	// Deleting: the object has a deletionTimestamp.
	Deleting bool
	// Held: the handler's finalizer is on the object.
	Held bool
	// Policy is the strongest policy of the handler's bindings that match
	// the object now and hold it.
	Policy Policy
	// Work is where the deletion work stands; only read while Deleting.
	Work Work
}

// Action is what becomes of the hold.
type Action int

const (
	// Keep: nothing to write about the hold.
	Keep Action = iota
	// Add the hold (rule 1).
	Add
	// Release the hold, for Decision.Rule.
	Release
)

func (a Action) String() string {
	switch a {
	case Keep:
		return "keep"
	case Add:
		return "add"
	case Release:
		return "release"
	}
	return "unknown"
}

// Rule names the rule of the contract that decided, numbered as in "The
// contract" of docs/design.md, as the Events, the tests and the chaos
// checker number them.
type Rule string

const (
	RuleNone Rule = ""
	// RuleNeeds: a matching binding holds the object (rule 1).
	RuleNeeds Rule = "1"
	// RuleAcked: the handler acknowledged its deletion work (3a).
	RuleAcked Rule = "3a"
	// RuleTimeout: a cancellation timeout passed without the ack (3b).
	RuleTimeout Rule = "3b"
	// RuleAbsent: being deleted, and the handler is past its grace (3c).
	RuleAbsent Rule = "3c"
	// RuleLongAbsent: the handler is past absent_release_after (3d).
	RuleLongAbsent Rule = "3d"
	// RuleNoLongerMatching: no binding that holds matches any more: the
	// object changed, or the handler dropped the binding (3e).
	RuleNoLongerMatching Rule = "3e"
)

// Decision is what to do about one object's hold now.
type Decision struct {
	Action Action
	// Rule is the rule that decided an Add or a Release.
	Rule Rule
	// Deliver: the object is being deleted and its deletion work is to be
	// delivered to the handler (or waited for) before anything else.
	Deliver bool
}

// Decide applies the hold contract to one object of one handler whose
// presence is p.
func Decide(o Object, p Presence) Decision {
	if o.Deleting {
		return decideDeleting(o, p)
	}
	switch {
	case o.Policy == NoHold && o.Held:
		return Decision{Action: Release, Rule: RuleNoLongerMatching}
	case o.Policy == NoHold:
		return Decision{}
	case p == LongAbsent && o.Held && o.Policy != Strict:
		return Decision{Action: Release, Rule: RuleLongAbsent}
	case p == Absent || p == LongAbsent:
		// Nothing is added for a handler that is not there to do the
		// work; it is added when the handler returns.
		return Decision{}
	case !o.Held:
		return Decision{Action: Add, Rule: RuleNeeds}
	}
	return Decision{}
}

// decideDeleting is Decide for an object being deleted. No hold is ever
// added to it: the API server refuses new finalizers once deletion started.
func decideDeleting(o Object, p Presence) Decision {
	here := p == Present || p == InGrace
	work := o.Work
	if work == GaveUp && o.Policy == Strict {
		work = Pending // STRICT work ends only with the handler's word
	}
	switch {
	case !o.Held:
		// Nothing to release; optional delete bindings are still told.
		return Decision{Deliver: here && work == Pending}
	case work == Acked, work == GaveUp:
		return Decision{Action: Release, Rule: RuleAcked}
	case work == TimedOut:
		return Decision{Action: Release, Rule: RuleTimeout}
	case o.Policy == NoHold:
		return Decision{Action: Release, Rule: RuleNoLongerMatching}
	case here:
		return Decision{Deliver: true}
	case o.Policy == Strict:
		// Kept through absence; the work is delivered when it returns.
		return Decision{}
	}
	return Decision{Action: Release, Rule: RuleAbsent}
}
