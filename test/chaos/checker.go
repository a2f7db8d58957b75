package chaos

import (
	"cmp"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// Violation is one breach of the contract that Check found in a history.
type Violation struct {
	// Rule is the number of the contract's rule broken, as docs/design.md
	// numbers them (2 to 7: the checker has no check of rule 1); Check
	// names the check that failed, e.g. "stuck-hold" (rules 3 and 7 have
	// two).
	Rule  int
	Check string
	// The object; for rule 7, Resource is "broker" and Name the broker.
	UID, Namespace, Name, Resource string
	At                             time.Time
	Detail                         string
	// Faults are those under way in the 30 s up to At, for context.
	Faults []Fault
}

// ruleChecks are the checks of each rule of docs/design.md, by number; a
// rule with none (1: a hold is added only where needed) is left out.
var ruleChecks = [...]string{
	2: "strict-released", 3: "stuck-hold, delete-skipped", 4: "foreign-removed",
	5: "late-delivery", 6: "create-missed", 7: "broker-panic, leak",
}

const (
	// clockSkew is allowed between the processes whose logs make a history:
	// an ack is logged by the handler, a release seen by the run's watch.
	clockSkew = time.Second
	// lateAfter: the broker learns of a release from its own watch or the
	// ack's arrival, a moment after the run does; past this, a delivery for
	// a released object is acting on one that is no longer there (rule 5).
	lateAfter = 2 * time.Second
	// noneTimerLateAfter: a NONE timer has no hold to go with; it stops
	// only when the broker's watch says DELETED, so it gets a second more.
	noneTimerLateAfter = 3 * time.Second
	// faultContext: faults this close before a violation or a delete are
	// shown as its context, or taken as the cause of its latency.
	faultContext = 30 * time.Second
)

// A broker leaks when at the end it has more than twice the goroutines or
// memory it had once warm, plus a margin: a backlog after Quiet and larger
// caches may need more, and small samples are noisy, but a leak grows
// with the run and passes any fixed bound on a long enough one.
const (
	leakGoroutineFactor = 2
	leakGoroutineMargin = 100
	leakRSSFactor       = 2
	leakRSSMargin       = 256 << 20
)

// Check judges a history against the contract's rules. It is pure;
// violations come sorted by rule, time and object, the same for the same
// history.
func Check(h *History) []Violation {
	ix := newHistIndex(h)
	var vs []Violation
	for _, check := range []func(*histIndex) []Violation{
		checkStrictDeletes, checkStuckHolds, checkDeletes, checkForeign, checkLate, checkCreates, checkBrokers,
	} {
		vs = append(vs, check(ix)...)
	}
	for i := range vs {
		vs[i].Faults = ix.faultsAround(vs[i].At)
	}
	slices.SortStableFunc(vs, func(a, b Violation) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), a.At.Compare(b.At), strings.Compare(a.UID, b.UID),
			strings.Compare(a.Name, b.Name), strings.Compare(a.Check, b.Check), strings.Compare(a.Detail, b.Detail))
	})
	return vs
}

// histIndex is a history arranged once for every check: by UID, in time.
type histIndex struct {
	h          *History
	hold       string // the run's hold, HoldPrefix+Handler
	ops        map[string][]*Op
	deliveries map[string][]*Delivery
	obs        map[string][]*Observation
	events     map[string][]*Event
	final      map[string]*Object
	life       map[string]lifecycle
	faults     []Fault // by At
	long       []Fault // those lasting longer than faultContext, by At
}

// lifecycle is the end of an object's life as the history shows it.
type lifecycle struct {
	// deleting is when its deletion began: its first successful delete or
	// the first observation of it deleting, whichever came first; zero
	// when unknown.
	deleting time.Time
	// released is the first observation of it deleting without the run's
	// hold, or gone, after one with the hold; nil when none.
	released *Observation
	gone     *Observation // its first observation gone
}

func newHistIndex(h *History) *histIndex {
	ix := &histIndex{
		h: h, hold: HoldPrefix + h.Handler, life: map[string]lifecycle{},
		ops:        byUID(h.Ops, func(o *Op) string { return o.UID }),
		deliveries: byUID(h.Deliveries, func(d *Delivery) string { return d.UID }),
		obs:        byUID(h.Observations, func(o *Observation) string { return o.UID }),
		events:     byUID(h.Events, func(e *Event) string { return e.UID }),
		final:      map[string]*Object{},
	}
	for i := range h.Final {
		ix.final[h.Final[i].UID] = &h.Final[i]
	}
	for _, ops := range ix.ops {
		slices.SortStableFunc(ops, func(a, b *Op) int { return a.At.Compare(b.At) })
	}
	for uid, os := range ix.obs {
		slices.SortStableFunc(os, func(a, b *Observation) int { return a.At.Compare(b.At) })
		ix.life[uid] = ix.lifecycleOf(uid, os)
	}
	ix.faults = slices.Clone(h.Faults)
	slices.SortStableFunc(ix.faults, func(a, b Fault) int { return a.At.Compare(b.At) })
	for _, f := range ix.faults {
		if f.Healed.Sub(f.At) > faultContext {
			ix.long = append(ix.long, f)
		}
	}
	return ix
}

// byUID groups pointers to the elements of s by UID, in their order in s.
func byUID[T any](s []T, uid func(*T) string) map[string][]*T {
	m := map[string][]*T{}
	for i := range s {
		m[uid(&s[i])] = append(m[uid(&s[i])], &s[i])
	}
	return m
}

// lifecycleOf reads an object's end from its observations. The watch may
// miss states (it relists after a gap): seen held, then next seen gone,
// it was released when seen gone.
func (ix *histIndex) lifecycleOf(uid string, os []*Observation) lifecycle {
	var l lifecycle
	if i := slices.IndexFunc(ix.ops[uid], func(op *Op) bool { return op.Kind == OpDelete && op.Err == "" }); i >= 0 {
		l.deleting = ix.ops[uid][i].At
	}
	held := false
	for _, o := range os {
		if o.Deleting && (l.deleting.IsZero() || o.At.Before(l.deleting)) {
			l.deleting = o.At
		}
		if o.Gone && l.gone == nil {
			l.gone = o
		}
		has := !o.Gone && slices.Contains(o.Finalizers, ix.hold)
		if held && !has && (o.Deleting || o.Gone) && l.released == nil {
			l.released = o
		}
		held = has
	}
	return l
}

// acked is the last delivery of binding for uid answered with one of
// outcomes no later than by (at any time when by is zero), or nil.
func (ix *histIndex) acked(uid, binding string, by time.Time, outcomes ...string) *Delivery {
	var last *Delivery
	for _, d := range ix.deliveries[uid] {
		if d.Binding == binding && slices.Contains(outcomes, d.Outcome) && (by.IsZero() || !d.Answered.After(by)) &&
			(last == nil || d.Answered.After(last.Answered)) {
			last = d
		}
	}
	return last
}

// faultsAround are the faults under way in the faultContext up to at: those
// injected in it, and longer ones injected before it and not yet healed.
func (ix *histIndex) faultsAround(at time.Time) []Fault {
	from := at.Add(-faultContext)
	var out []Fault
	for _, f := range ix.long {
		if f.At.Before(from) && !f.Healed.Before(from) {
			out = append(out, f)
		}
	}
	lo := sort.Search(len(ix.faults), func(i int) bool { return !ix.faults[i].At.Before(from) })
	hi := sort.Search(len(ix.faults), func(i int) bool { return ix.faults[i].At.After(at) })
	return append(out, ix.faults[lo:max(lo, hi)]...)
}

// violation builds a Violation, its Detail from format and args.
func violation(rule int, check, resource, namespace, name, uid string, at time.Time, format string, args ...any) Violation {
	return Violation{Rule: rule, Check: check, Resource: resource, Namespace: namespace, Name: name, UID: uid, At: at,
		Detail: fmt.Sprintf(format, args...)}
}

// checkStuckHolds (rule 3: every hold goes, by one of 3a to 3f, in time):
// at the end, no object has been deleting with the run's hold for longer
// than grace and bound, and none has the hold of a handler the run never
// had.
func checkStuckHolds(ix *histIndex) []Violation {
	h := ix.h
	var vs []Violation
	for _, o := range h.Final {
		for _, f := range o.Finalizers {
			switch {
			case !strings.HasPrefix(f, HoldPrefix):
			case f != ix.hold:
				vs = append(vs, violation(3, "stuck-hold", o.Resource, o.Namespace, o.Name, o.UID, h.End,
					"the hold %s of a handler this run never had is still on at the end", f))
			case o.Deleting:
				// A deletion whose start the history does not show (zero)
				// cannot be shown to be within the bound.
				since := cmp.Or(o.DeletingSince, ix.life[o.UID].deleting)
				if h.End.Sub(since) > h.Grace+h.Bound {
					vs = append(vs, violation(3, "stuck-hold", o.Resource, o.Namespace, o.Name, o.UID, cmp.Or(since, h.End),
						"deleting since %s and still held by %s at the end (%s), past grace %v + bound %v",
						sinceStart(h.Start, since), f, sinceStart(h.Start, h.End), h.Grace, h.Bound))
				}
			}
		}
	}
	return vs
}

// checkCreates (rule 6: every cause is delivered until answered): every
// widget created and still there, not deleting, at the end had its create
// binding answered ok. ConfigMaps have no create binding.
func checkCreates(ix *histIndex) []Violation {
	var vs []Violation
	for _, op := range ix.h.Ops {
		if op.Kind != OpCreate || op.Err != "" || op.Resource != Widgets {
			continue
		}
		if ix.acked(op.UID, BindingCreate, time.Time{}, "ok") != nil {
			continue
		}
		// The broker saw it live if it is there at the end, or if it held
		// it before its deletion: the hold goes with the create's outcome.
		o, there := ix.final[op.UID]
		seenLive := there && !o.Deleting
		if !seenLive && !ix.heldLive(op.UID) {
			continue
		}
		// A create that failed is held meanwhile, so that a deletion still
		// runs the delete bindings; the broker says so in an Event.
		if ix.excused(op.UID, time.Time{}, ix.h.End, []string{"HandlerRetrying", "RetriesExhausted", "HandlerFailed"}) {
			continue
		}
		vs = append(vs, violation(6, "create-missed", op.Resource, op.Namespace, op.Name, op.UID, op.At,
			"created at %s and seen live by the broker (held, or there at the end), but its %q binding never answered ok; %s",
			sinceStart(ix.h.Start, op.At), BindingCreate, ix.tried(op.UID, BindingCreate)))
	}
	return vs
}

// heldLive reports whether the run's hold was seen on the object before
// its deletion began.
func (ix *histIndex) heldLive(uid string) bool {
	for _, o := range ix.obs[uid] {
		if !o.Deleting && !o.Gone && slices.Contains(o.Finalizers, ix.hold) {
			return true
		}
	}
	return false
}

// checkDeletes (rule 3: a hold goes only by one of 3a to 3f): a widget's
// hold is released only after its delete binding answered (3a), or with an
// Event naming the rule that released it.
func checkDeletes(ix *histIndex) []Violation {
	return ix.unackedReleases(3, "delete-skipped", Widgets, BindingDelete, "HoldReleased", "RetriesExhausted", "DaemonStopTimeout")
}

// checkStrictDeletes (rule 2: STRICT): a STRICT hold waits for the handler
// whatever else happens; only a cancellation timeout (3b) lets it go
// unanswered.
func checkStrictDeletes(ix *histIndex) []Violation {
	return ix.unackedReleases(2, "strict-released", ConfigMaps, BindingStrictDelete, "DaemonStopTimeout")
}

// unackedReleases finds the objects of resource released before binding
// answered ok or fail, with no Event of the excusing reasons. An Event
// counts only from the deletion on (from any time when its start is
// unknown): a RetriesExhausted of an update, say, earlier in the object's
// life releases nothing.
func (ix *histIndex) unackedReleases(rule int, check, resource, binding string, excuses ...string) []Violation {
	var vs []Violation
	for uid, l := range ix.life {
		r := l.released
		if r == nil || r.Resource != resource {
			continue
		}
		by := r.At.Add(clockSkew)
		if ix.acked(uid, binding, by, "ok", "fail") != nil || ix.excused(uid, l.deleting.Add(-clockSkew), by, excuses) {
			continue
		}
		how := "seen deleting without it"
		if r.Gone {
			how = "seen gone"
		}
		vs = append(vs, violation(rule, check, r.Resource, r.Namespace, r.Name, uid, r.At,
			"the hold %s was released (%s at %s) before its %q binding answered ok or fail; %s",
			ix.hold, how, sinceStart(ix.h.Start, r.At), binding, ix.tried(uid, binding)))
	}
	return vs
}

// excused says whether uid has an Event of one of reasons from from to by.
func (ix *histIndex) excused(uid string, from, by time.Time, reasons []string) bool {
	for _, e := range ix.events[uid] {
		if slices.Contains(reasons, e.Reason) && !e.At.After(by) && !e.At.Before(from) {
			return true
		}
	}
	return false
}

// tried tells what became of binding's deliveries for uid, for a detail.
func (ix *histIndex) tried(uid, binding string) string {
	var n int
	var last *Delivery
	for _, d := range ix.deliveries[uid] {
		if d.Binding == binding {
			n++
			if last == nil || d.Answered.After(last.Answered) {
				last = d
			}
		}
	}
	if last == nil {
		return "it was never delivered"
	}
	return fmt.Sprintf("delivered %d times, the last answered %s at %s by %s",
		n, last.Outcome, sinceStart(ix.h.Start, last.Answered), last.Instance)
}

// checkForeign (rule 4: writes never clobber): the foreign finalizer leaves an object only by the
// foreign controller's own remove, one remove for each time it leaves.
// Gone counts as leaving: the API server deletes nothing with it on.
func checkForeign(ix *histIndex) []Violation {
	var vs []Violation
	for uid, os := range ix.obs {
		var removes []*Op // in time order, as ops are
		for _, op := range ix.ops[uid] {
			if op.Kind == OpForeignRemove && op.Err == "" {
				removes = append(removes, op)
			}
		}
		had := false
		for _, o := range os {
			has := !o.Gone && slices.Contains(o.Finalizers, ForeignFinalizer)
			if had && !has {
				if len(removes) > 0 && !removes[0].At.After(o.At.Add(clockSkew)) {
					removes = removes[1:]
				} else {
					how := "seen without it"
					if o.Gone {
						how = "seen gone"
					}
					vs = append(vs, violation(4, "foreign-removed", o.Resource, o.Namespace, o.Name, uid, o.At,
						"%s was removed (%s at %s) with no foreign-remove of this object by then",
						ForeignFinalizer, how, sinceStart(ix.h.Start, o.At)))
				}
			}
			had = has
		}
	}
	return vs
}

// checkLate (rule 5: identity is the UID, and a released object's work is
// over): nothing is delivered for an object once it is released:
// seen gone, or for a widget, once its delete was answered before the
// release. Watch events and admission reviews are exempt: they report
// what the API server did to the object, a removal of the foreign
// finalizer after the release for one, and the broker must pass them on.
func checkLate(ix *histIndex) []Violation {
	var vs []Violation
	for uid, ds := range ix.deliveries {
		l := ix.life[uid]
		var gone, ref time.Time
		what := "seen gone"
		if l.gone != nil {
			gone, ref = l.gone.At, l.gone.At
		}
		if r := l.released; r != nil && r.Resource == Widgets {
			if d := ix.acked(uid, BindingDelete, r.At.Add(clockSkew), "ok", "fail"); d != nil && (ref.IsZero() || d.Answered.Before(ref)) {
				ref, what = d.Answered, "delete answered "+d.Outcome
			}
		}
		if ref.IsZero() {
			continue
		}
		var first *Delivery
		n := 0
		for _, d := range ds {
			limit, from := lateAfter, ref
			switch d.Binding {
			case BindingNoneTimer:
				limit = noneTimerLateAfter
			case BindingDelete, BindingStrictDelete:
				// A delete delivered again after its ack is a duplicate,
				// the price of at-least-once: a new leader that took over
				// before the release landed, or that finds the object
				// still deleting under another finalizer, does not know
				// the work was done. Only once the object is gone may no
				// delete come.
				if from = gone; from.IsZero() {
					continue
				}
			}
			if d.Kind == "event" || d.Kind == "validate" || d.Received.Sub(from) <= limit {
				continue
			}
			// The broker learns of a deletion from its own watch: while its
			// way to the API server is slowed, cut or restarting (the API
			// server or its etcd), it cannot know sooner than the fault is
			// healed.
			if healed := ix.brokerBlindUntil(from.Add(-limit), d.Received); healed.After(from) {
				from = healed
			}
			if d.Received.Sub(from) > limit {
				n++
				if first == nil || d.Received.Before(first.Received) {
					first = d
				}
			}
		}
		if first != nil {
			vs = append(vs, violation(5, "late-delivery", first.Resource, first.Namespace, first.Name, uid, first.Received,
				"%d deliveries received too long after the release (%s at %s); the first, %s (%s, attempt %d), %v after it, by %s",
				n, what, sinceStart(ix.h.Start, ref), first.Binding, first.Kind, first.Attempt,
				first.Received.Sub(ref).Round(time.Millisecond), first.Instance))
		}
	}
	return vs
}

// brokerBlindUntil is when the last fault that kept a broker from seeing
// the API server as it is, between from and until, was healed: a network
// fault on a broker's link to the API server, an API server restart, an
// etcd restart, or the API server cut off from etcd for a compaction (and
// its watch caches listing again): the API server can then neither write
// nor tell its watchers anything. Zero when there was none.
func (ix *histIndex) brokerBlindUntil(from, until time.Time) time.Time {
	var healed time.Time
	for _, f := range ix.h.Faults {
		blinds := f.Kind == FaultAPIRestart || f.Kind == FaultEtcdRestart || f.Kind == FaultEtcdCompact ||
			strings.HasSuffix(f.Target, "->apiserver") && (f.Kind == FaultNetLatency || f.Kind == FaultNetBlackhole || f.Kind == FaultNetReset)
		if blinds && !f.At.After(until) && !f.Healed.Before(from) && f.Healed.After(healed) {
			healed = f.Healed
		}
	}
	return healed
}

// checkBrokers (rule 7: the broker keeps running): no broker panicked or
// leaked.
func checkBrokers(ix *histIndex) []Violation {
	var vs []Violation
	end := ix.h.End
	for _, b := range ix.h.Brokers {
		if len(b.Panics) > 0 {
			vs = append(vs, violation(7, "broker-panic", "broker", "", b.Name, "", end,
				"%d panic line(s); the first: %s", len(b.Panics), b.Panics[0]))
		}
		if limit := leakGoroutineFactor*b.FirstGoroutines + leakGoroutineMargin; b.FirstGoroutines > 0 && b.LastGoroutines > limit {
			vs = append(vs, violation(7, "leak", "broker", "", b.Name, "", end,
				"%d goroutines at the end, from %d once warm (limit %d)", b.LastGoroutines, b.FirstGoroutines, limit))
		}
		if limit := leakRSSFactor*b.FirstRSS + leakRSSMargin; b.FirstRSS > 0 && b.LastRSS > limit {
			vs = append(vs, violation(7, "leak", "broker", "", b.Name, "", end,
				"resident memory %d MiB at the end, from %d MiB once warm (limit %d MiB)", b.LastRSS>>20, b.FirstRSS>>20, limit>>20))
		}
	}
	return vs
}
