package contract

import (
	"fmt"
	"testing"
)

// TestDecide covers every rule under each policy: the hold a live object
// gets, and every way a hold goes. Rows are grouped and named by the rules
// of "The contract" in docs/design.md.
func TestDecide(t *testing.T) {
	keep := Decision{}
	deliver := Decision{Deliver: true}
	add := Decision{Action: Add, Rule: RuleNeeds}
	release := func(r Rule) Decision { return Decision{Action: Release, Rule: r} }
	tests := []struct {
		name string
		obj  Object
		p    Presence
		want Decision
	}{
		// Rule 1: added where a binding that holds matches, while the
		// handler is there to do the work.
		{"hold added to a live object", Object{Policy: Hold}, Present, add},
		{"strict added to a live object", Object{Policy: Strict}, Present, add},
		{"added within the grace", Object{Policy: Hold}, InGrace, add},
		{"nothing added without a binding that holds", Object{Policy: NoHold}, Present, keep},
		{"nothing added while absent", Object{Policy: Hold}, Absent, keep},
		{"nothing added while long absent", Object{Policy: Strict}, LongAbsent, keep},
		{"held and still needed", Object{Policy: Hold, Held: true}, Present, keep},
		{"never added to an object being deleted", Object{Deleting: true, Policy: Hold}, Present, deliver},

		// 3a: the handler acknowledged its deletion work.
		{"3a hold acked", Object{Deleting: true, Held: true, Policy: Hold, Work: Acked}, Present, release(RuleAcked)},
		{"3a strict acked", Object{Deleting: true, Held: true, Policy: Strict, Work: Acked}, Present, release(RuleAcked)},
		{"3a acked as the handler left", Object{Deleting: true, Held: true, Policy: Strict, Work: Acked}, Absent, release(RuleAcked)},
		{"3a hold given up by the broker", Object{Deleting: true, Held: true, Policy: Hold, Work: GaveUp}, Present, release(RuleAcked)},
		{"strict never given up by the broker", Object{Deleting: true, Held: true, Policy: Strict, Work: GaveUp}, Present, deliver},
		{"strict given up, handler absent", Object{Deleting: true, Held: true, Policy: Strict, Work: GaveUp}, LongAbsent, keep},
		{"work pending: delivered", Object{Deleting: true, Held: true, Policy: Hold}, Present, deliver},
		{"work pending in grace: waits for the handler", Object{Deleting: true, Held: true, Policy: Strict}, InGrace, deliver},

		// 3b: a cancellation timeout passed without the ack.
		{"3b hold", Object{Deleting: true, Held: true, Policy: Hold, Work: TimedOut}, Present, release(RuleTimeout)},
		{"3b strict", Object{Deleting: true, Held: true, Policy: Strict, Work: TimedOut}, Present, release(RuleTimeout)},
		{"3b strict while absent", Object{Deleting: true, Held: true, Policy: Strict, Work: TimedOut}, Absent, release(RuleTimeout)},

		// 3c: being deleted, the handler past its grace.
		{"3c hold", Object{Deleting: true, Held: true, Policy: Hold}, Absent, release(RuleAbsent)},
		{"3c hold, long absent", Object{Deleting: true, Held: true, Policy: Hold}, LongAbsent, release(RuleAbsent)},
		{"3c strict exempt", Object{Deleting: true, Held: true, Policy: Strict}, Absent, keep},
		{"3c strict exempt, long absent", Object{Deleting: true, Held: true, Policy: Strict}, LongAbsent, keep},
		{"no release within the grace", Object{Deleting: true, Held: true, Policy: Hold}, InGrace, deliver},

		// 3d: long absent, live objects stripped.
		{"3d hold", Object{Held: true, Policy: Hold}, LongAbsent, release(RuleLongAbsent)},
		{"3d strict exempt", Object{Held: true, Policy: Strict}, LongAbsent, keep},
		{"3d not before absent_release_after", Object{Held: true, Policy: Hold}, Absent, keep},

		// 3e: no binding that holds matches any more.
		{"3e live", Object{Held: true, Policy: NoHold}, Present, release(RuleNoLongerMatching)},
		{"3e live, handler absent", Object{Held: true, Policy: NoHold}, Absent, release(RuleNoLongerMatching)},
		{"3e deleting", Object{Deleting: true, Held: true, Policy: NoHold}, Present, release(RuleNoLongerMatching)},
		{"3e deleting, handler in grace", Object{Deleting: true, Held: true, Policy: NoHold}, InGrace, release(RuleNoLongerMatching)},

		// Objects not held.
		{"optional delete delivered", Object{Deleting: true, Policy: NoHold}, Present, deliver},
		{"optional delete not waited for when absent", Object{Deleting: true, Policy: NoHold}, Absent, keep},
		{"done and not held", Object{Deleting: true, Policy: Hold, Work: Acked}, Present, keep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Decide(tt.obj, tt.p); got != tt.want {
				t.Errorf("Decide(%+v, %v) = %+v, want %+v", tt.obj, tt.p, got, tt.want)
			}
		})
	}
}

// TestDecideCoversEveryState: every combination of inputs gets a decision
// that keeps the contract's local promises.
func TestDecideCoversEveryState(t *testing.T) {
	for _, deleting := range []bool{false, true} {
		for _, held := range []bool{false, true} {
			for _, pol := range []Policy{NoHold, Hold, Strict} {
				for _, work := range []Work{Pending, Acked, GaveUp, TimedOut} {
					for _, p := range []Presence{Present, InGrace, Absent, LongAbsent} {
						o := Object{Deleting: deleting, Held: held, Policy: pol, Work: work}
						d := Decide(o, p)
						if err := checkLocal(o, p, d); err != nil {
							t.Errorf("Decide(%+v, %v) = %+v: %v", o, p, d, err)
						}
					}
				}
			}
		}
	}
}

// checkLocal states what any single decision must respect, whatever led to
// it. The model test checks it after every step too.
func checkLocal(o Object, p Presence, d Decision) error {
	switch d.Action {
	case Add:
		switch {
		case o.Deleting:
			return fmt.Errorf("a hold added to an object being deleted")
		case o.Held:
			return fmt.Errorf("a hold added twice")
		case o.Policy == NoHold:
			return fmt.Errorf("a hold added with no binding that holds")
		case p == Absent || p == LongAbsent:
			return fmt.Errorf("a hold added for a handler that is %v", p)
		}
	case Release:
		if !o.Held {
			return fmt.Errorf("released a hold that is not there")
		}
		if d.Deliver {
			return fmt.Errorf("released while deletion work is still to be delivered")
		}
		switch d.Rule {
		case RuleAcked:
			if !o.Deleting || (o.Work != Acked && !(o.Work == GaveUp && o.Policy != Strict)) {
				return fmt.Errorf("3a without acknowledged work")
			}
		case RuleTimeout:
			if !o.Deleting || o.Work != TimedOut {
				return fmt.Errorf("3b without a timeout")
			}
		case RuleAbsent:
			if !o.Deleting || o.Policy != Hold || (p != Absent && p != LongAbsent) {
				return fmt.Errorf("3c for a %v hold of a %v handler", o.Policy, p)
			}
		case RuleLongAbsent:
			if o.Deleting || o.Policy != Hold || p != LongAbsent {
				return fmt.Errorf("3d for a %v hold of a %v handler", o.Policy, p)
			}
		case RuleNoLongerMatching:
			if o.Policy != NoHold {
				return fmt.Errorf("3e while a binding still holds")
			}
		default:
			return fmt.Errorf("a release without a rule")
		}
	case Keep:
		if d.Rule != RuleNone {
			return fmt.Errorf("kept, naming rule %q", d.Rule)
		}
		// Nothing may stay stuck: a HOLD on an object being deleted whose
		// handler is past its grace goes now.
		if o.Deleting && o.Held && o.Policy == Hold && (p == Absent || p == LongAbsent) {
			return fmt.Errorf("kept a HOLD on an object being deleted past the grace")
		}
	}
	if d.Deliver && !o.Deleting {
		return fmt.Errorf("deletion work delivered for a live object")
	}
	return nil
}
