package dispatch

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/broker/binding"
)

// passCase is one pass of a handler's bindings over one object: what the
// informer saw, how the delivery and the writer answer, and what the pass
// delivered, wrote and left for the queue.
type passCase struct {
	name     string
	bindings []*binding.Binding
	obj      func(t *testing.T) *unstructured.Unstructured
	initial  bool
	replies  map[string][]reply
	answers  []writeAnswer
	// setup, when set, changes the test before the pass (presence, work).
	setup func(p *passTest, o *object)

	sent   []string // "kind binding", in order
	writes []string // see fakeWriter.summary
	res    result
	events []string // reasons of the Events posted
	// check, when set, looks at what else the pass left.
	check func(t *testing.T, p *passTest, o *object)
}

// run makes one pass (reconcile) and compares.
func (tc passCase) run(t *testing.T) {
	p := newPassTest(t, tc.bindings...)
	o := p.see(tc.obj(t), watchAdded, tc.initial)
	for id, rs := range tc.replies {
		p.dl.replies[id] = rs
	}
	p.w.answers = tc.answers
	if tc.setup != nil {
		tc.setup(p, o)
	}
	res := p.r.reconcile(context.Background(), o.uid)
	if res.after != tc.res.after || res.cut != tc.res.cut || (res.err == nil) != (tc.res.err == nil) {
		t.Errorf("result %+v, want %+v", res, tc.res)
	}
	if got := p.dl.kinds(); !slices.Equal(got, tc.sent) {
		t.Errorf("delivered %q, want %q", got, tc.sent)
	}
	if got := p.w.summary(); !slices.Equal(got, tc.writes) {
		t.Errorf("writes %q, want %q", got, tc.writes)
	}
	if !slices.Equal(p.events.reasons, tc.events) {
		t.Errorf("Events %q, want %q", p.events.reasons, tc.events)
	}
	if tc.check != nil {
		tc.check(t, p, o)
	}
}

var errWrite = errors.New("the API server is down")

func TestLiveObjectPass(t *testing.T) {
	create := func(id string) *binding.Binding { return bind(id, binding.Create, binding.PolicyHold) }
	fresh := func(*testing.T) *unstructured.Unstructured { return sized("1", 1, "red") }
	handled := func(t *testing.T) *unstructured.Unstructured {
		return held(handledAs(t, sized("1", 1, "red"), sized("1", 1, "red")))
	}
	resized := func(t *testing.T) *unstructured.Unstructured {
		return held(handledAs(t, sized("2", 2, "red"), sized("1", 1, "red")))
	}
	for _, tc := range []passCase{
		{
			name: "a new object is delivered as a create and held with its handled state in one write", bindings: []*binding.Binding{create("c")},
			obj: fresh, sent: []string{"create c"}, writes: []string{"+hold handled"},
			check: func(t *testing.T, _ *passTest, o *object) {
				if o.settled != "2" {
					t.Errorf("settled %q, want the written state's 2", o.settled)
				}
			},
		},
		{
			name: "an object handled in its current state is not delivered again", bindings: []*binding.Binding{create("c")},
			obj: handled,
		},
		{
			name: "a changed spec is an update, with its old side and the diff", bindings: []*binding.Binding{bind("u", binding.Update, binding.PolicyHold)},
			obj: resized, sent: []string{"update u"}, writes: []string{"handled"},
			check: func(t *testing.T, p *passTest, _ *object) {
				if d := p.dl.sent[0].d; len(d.GetOldObject()) == 0 || len(d.GetDiff()) == 0 {
					t.Errorf("update without its old side or diff: %v", d)
				}
			},
		},
		{
			name: "an object of an initial list is resumed", bindings: []*binding.Binding{bind("r", binding.Resume, binding.PolicyHold)},
			obj: handled, initial: true, sent: []string{"resume r"}, writes: []string{"handled"},
			check: func(t *testing.T, p *passTest, o *object) {
				p.h.mu.Lock()
				defer p.h.mu.Unlock()
				if o.initial {
					t.Error("the initial list is still to be handled after the pass")
				}
			},
		},
		{
			name: "a field binding gets its field's two sides, and only when the field changed",
			bindings: []*binding.Binding{
				{ID: "size", Kind: binding.Field, Policy: binding.PolicyHold, FieldPath: []string{"spec", "size"}},
				{ID: "color", Kind: binding.Field, Policy: binding.PolicyHold, FieldPath: []string{"spec", "color"}},
			},
			obj: resized, sent: []string{"field size"}, writes: []string{"handled"},
			check: func(t *testing.T, p *passTest, _ *object) {
				if d := p.dl.sent[0].d; string(d.GetFieldOld()) != "1" || string(d.GetFieldNew()) != "2" {
					t.Errorf("field sides %s -> %s, want 1 -> 2", d.GetFieldOld(), d.GetFieldNew())
				}
			},
		},
		{
			name: "a binding in backoff is passed over, the others go on, and the hold is written alone", bindings: []*binding.Binding{create("a"), create("b")},
			obj: fresh, replies: map[string][]reply{"a": {{result: lookAgainIn(3 * time.Second)}}},
			sent: []string{"create a", "create b"}, writes: []string{"+hold"}, res: lookAgainIn(3 * time.Second),
			check: func(t *testing.T, _ *passTest, o *object) {
				if o.work.done["a"] || !o.work.done["b"] {
					t.Errorf("done %v, want b only", o.work.done)
				}
			},
		},
		{
			name: "a binding that failed for good is done, and the outcome written", bindings: []*binding.Binding{create("c")},
			obj: fresh, replies: map[string][]reply{"c": {failAck()}}, sent: []string{"create c"}, writes: []string{"+hold handled"},
		},
		{
			name: "the handler's patch goes in the outcome write", bindings: []*binding.Binding{create("c")},
			obj: fresh, replies: map[string][]reply{"c": {ok(`{"metadata":{"labels":{"size":"small"}}}`)}},
			sent: []string{"create c"}, writes: []string{"+hold handled patch"},
		},
		{
			name: "a patch of what the handler may not write is not written, with an Event", bindings: []*binding.Binding{create("c")},
			obj: fresh, replies: map[string][]reply{"c": {ok(`{"metadata":{"finalizers":["x"]}}`)}},
			sent: []string{"create c"}, writes: []string{"+hold handled"}, events: []string{"InvalidPatch"},
		},
		{
			name: "an object no binding holds any more is released (rule 3e)", bindings: []*binding.Binding{bind("c", binding.Create, binding.PolicyNone)},
			obj: handled, writes: []string{"-hold"},
			check: func(t *testing.T, p *passTest, _ *object) {
				if n := p.w.writes[0].landed; n == nil || n.reason != "HoldReleased" {
					t.Errorf("release note %v, want HoldReleased", n)
				}
			},
		},
		{
			name: "waiting for an instance is cut short when the handler goes past its grace", bindings: []*binding.Binding{create("c")},
			obj: fresh, replies: map[string][]reply{"c": {{result: result{cut: cutAbsent}}}},
			sent: []string{"create c"}, res: result{cut: cutAbsent},
		},
		{
			name: "an outcome write waiting for its turn ends the pass and stays pending", bindings: []*binding.Binding{create("c")},
			obj: fresh, answers: []writeAnswer{{wait: 200 * time.Millisecond}},
			sent: []string{"create c"}, writes: []string{"+hold handled"}, res: lookAgainIn(200 * time.Millisecond),
			check: func(t *testing.T, _ *passTest, o *object) {
				if o.work.pending == nil || o.settled != "" {
					t.Errorf("pending %v, settled %q; want the write pending and nothing settled", o.work.pending, o.settled)
				}
			},
		},
		{
			name: "a failed write is retried with the queue's rate limit", bindings: []*binding.Binding{create("c")},
			obj: fresh, answers: []writeAnswer{{err: errWrite}},
			sent: []string{"create c"}, writes: []string{"+hold handled"}, res: failedWith(errWrite),
		},
		{
			name: "a pending write is made first, then the pass goes on with the state it wrote", bindings: []*binding.Binding{create("c")},
			obj: fresh,
			setup: func(p *passTest, o *object) {
				o.begin()
				o.work.pending = &write{addHold: true}
			},
			sent: []string{"create c"}, writes: []string{"+hold", "handled"},
		},
		{
			name: "the hold is not added while the handler is past its grace", bindings: []*binding.Binding{create("c")},
			obj: fresh, setup: func(p *passTest, _ *object) { p.absent(false) },
		},
		{
			name: "a long-absent handler's hold is stripped in the release limiter's turn (rule 3d)", bindings: []*binding.Binding{create("c")},
			obj: handled, setup: func(p *passTest, _ *object) { p.absent(true) }, writes: []string{"-hold"},
		},
		{
			name: "a long-absent handler's release waits for its turn", bindings: []*binding.Binding{create("c")},
			obj: handled, setup: func(p *passTest, _ *object) { p.absent(true); p.w.releaseWait = time.Second },
			res: lookAgainIn(time.Second),
		},
	} {
		t.Run(tc.name, tc.run)
	}
}

func TestDeletionPass(t *testing.T) {
	del := func(id string) *binding.Binding { return bind(id, binding.Delete, binding.PolicyHold) }
	doomed := func(t *testing.T) *unstructured.Unstructured {
		return deleting(held(handledAs(t, sized("3", 1, "red"), sized("3", 1, "red"))))
	}
	for _, tc := range []passCase{
		{
			name: "the delete binding is delivered, then the hold released", bindings: []*binding.Binding{del("d")},
			obj: doomed, sent: []string{"delete d"}, writes: []string{"-hold"},
		},
		{
			name: "each delete binding is delivered once, in order", bindings: []*binding.Binding{del("d1"), del("d2")},
			obj: doomed, sent: []string{"delete d1", "delete d2"}, writes: []string{"-hold"},
		},
		{
			name: "a delete binding in backoff keeps the hold and looks again when it is due", bindings: []*binding.Binding{del("d")},
			obj: doomed, replies: map[string][]reply{"d": {{result: lookAgainIn(2 * time.Second)}}},
			sent: []string{"delete d"}, res: lookAgainIn(2 * time.Second),
		},
		{
			name: "a delete binding that failed for good releases the hold", bindings: []*binding.Binding{del("d")},
			obj: doomed, replies: map[string][]reply{"d": {failAck()}}, sent: []string{"delete d"}, writes: []string{"-hold"},
		},
		{
			name: "past the grace, the hold is released without a delivery (rule 3c)", bindings: []*binding.Binding{del("d")},
			obj: doomed, setup: func(p *passTest, _ *object) { p.absent(false) }, writes: []string{"-hold"},
		},
		{
			name: "a STRICT hold is kept through the handler's absence", bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyStrict)},
			obj: doomed, setup: func(p *passTest, _ *object) { p.absent(false) },
		},
		{
			name: "the grace runs out while it waits for an instance: decided again, and released", bindings: []*binding.Binding{del("d")},
			obj: doomed, replies: map[string][]reply{"d": {{result: result{cut: cutAbsent}}}},
			setup: func(p *passTest, _ *object) { p.dl.during = func(*binding.Binding) { p.absent(false) } },
			sent:  []string{"delete d"}, writes: []string{"-hold"},
		},
		{
			name: "the object changes while it waits for an instance: the pass ends", bindings: []*binding.Binding{del("d")},
			obj: doomed, replies: map[string][]reply{"d": {{result: result{cut: cutChanged}}}},
			sent: []string{"delete d"}, res: result{cut: cutChanged},
		},
		{
			name: "an object without the hold is not written, its delete bindings still told", bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyNone)},
			obj:  func(t *testing.T) *unstructured.Unstructured { return deleting(sized("3", 1, "red")) },
			sent: []string{"delete d"},
		},
		{
			name: "a daemon that did not stop in time releases the hold (rule 3b)", bindings: []*binding.Binding{bind("dm", binding.Daemon, binding.PolicyHold)},
			obj: doomed, setup: func(_ *passTest, o *object) { o.daemonTimedOut = true }, writes: []string{"-hold"},
		},
		{
			name: "a release the API server refuses is dropped when it is pending, not retried forever", bindings: []*binding.Binding{del("d")},
			obj: doomed,
			setup: func(p *passTest, o *object) {
				// A release past the grace (3c), which still applies.
				p.absent(false)
				o.begin()
				o.work.pending = &write{removeHold: true}
				p.w.answers = []writeAnswer{{err: errRefused}}
			},
			writes: []string{"-hold", "-hold"},
		},
		{
			name: "a timer stops once deletion starts", bindings: []*binding.Binding{del("d"), {ID: "t", Kind: binding.Timer, Timer: binding.TimerOptions{Interval: time.Second}}},
			obj: doomed, setup: func(_ *passTest, o *object) { o.timers.add("t") },
			sent: []string{"delete d"}, writes: []string{"-hold"},
			check: func(t *testing.T, _ *passTest, o *object) {
				if o.timers.has("t") {
					t.Error("the timer still runs on an object being deleted")
				}
			},
		},
	} {
		t.Run(tc.name, tc.run)
	}
}

// TestDeliverDeletes: one delete binding at a time, the next not done and
// not in backoff; bindings that gave up are tried again only for STRICT.
func TestDeliverDeletes(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bindings []*binding.Binding
		work     func(o *object) // what was done before
		replies  map[string][]reply
		sent     []string
		res      result
		events   []string
		done     []string // done with the deletion afterwards
	}{
		{
			name:     "the first not done is delivered, and only it",
			bindings: []*binding.Binding{bind("d1", binding.Delete, binding.PolicyHold), bind("d2", binding.Delete, binding.PolicyHold)},
			sent:     []string{"delete d1"}, done: []string{"d1"},
		},
		{
			name:     "those done are passed over",
			bindings: []*binding.Binding{bind("d1", binding.Delete, binding.PolicyHold), bind("d2", binding.Delete, binding.PolicyHold)},
			work:     func(o *object) { o.markDone("d1") },
			sent:     []string{"delete d2"}, done: []string{"d1", "d2"},
		},
		{
			name:     "all in backoff: the soonest due",
			bindings: []*binding.Binding{bind("d1", binding.Delete, binding.PolicyHold), bind("d2", binding.Delete, binding.PolicyHold)},
			replies:  map[string][]reply{"d1": {{result: lookAgainIn(3 * time.Second)}}, "d2": {{result: lookAgainIn(time.Second)}}},
			sent:     []string{"delete d1", "delete d2"}, res: lookAgainIn(time.Second),
		},
		{
			name:     "a binding that does not match is not delivered",
			bindings: []*binding.Binding{{ID: "d", Kind: binding.Delete, Namespaces: []string{"elsewhere"}}},
		},
		{
			name:     "a STRICT binding the broker gave up on is tried again after the longest backoff",
			bindings: []*binding.Binding{bind("d", binding.Delete, binding.PolicyStrict)},
			work: func(o *object) {
				o.markDone("d")
				o.work.gaveUp = map[string]bool{"d": true}
			},
			res: lookAgainIn(4 * time.Second), events: []string{"HandlerRetrying"},
		},
		{
			name:     "a pass cut short ends the deliveries",
			bindings: []*binding.Binding{bind("d1", binding.Delete, binding.PolicyHold), bind("d2", binding.Delete, binding.PolicyHold)},
			replies:  map[string][]reply{"d1": {{result: result{cut: cutChanged}}}},
			sent:     []string{"delete d1"}, res: result{cut: cutChanged},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPassTest(t, tc.bindings...)
			o := p.see(deleting(held(sized("3", 1, "red"))), watchModified, false)
			p.begin(o)
			if tc.work != nil {
				tc.work(o)
			}
			for id, rs := range tc.replies {
				p.dl.replies[id] = rs
			}
			obj := o.decoded()
			res := p.r.deliverDeletes(context.Background(), o, obj, p.r.deletionWork(o, obj))
			if res != tc.res {
				t.Errorf("result %+v, want %+v", res, tc.res)
			}
			if got := p.dl.kinds(); !slices.Equal(got, tc.sent) {
				t.Errorf("delivered %q, want %q", got, tc.sent)
			}
			if !slices.Equal(p.events.reasons, tc.events) {
				t.Errorf("Events %q, want %q", p.events.reasons, tc.events)
			}
			var done []string
			for _, b := range tc.bindings {
				if o.work.done[b.ID] {
					done = append(done, b.ID)
				}
			}
			if !slices.Equal(done, tc.done) {
				t.Errorf("done %q, want %q", done, tc.done)
			}
		})
	}
}

// TestGoneObjectIsForgottenWithItsTimers: the watch says deleted; its
// timers stop and the object is forgotten, unless raw events still wait
// for its event bindings.
func TestGoneObjectIsForgottenWithItsTimers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bindings []*binding.Binding
		kept     bool
	}{
		{"no event binding", []*binding.Binding{bind("c", binding.Create, binding.PolicyHold)}, false},
		{"an event binding in backoff keeps its events", []*binding.Binding{bind("e", binding.Event, binding.PolicyNone)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPassTest(t, tc.bindings...)
			p.dl.replies["e"] = []reply{{result: lookAgainIn(time.Second)}}
			o := p.see(sized("1", 1, "red"), watchAdded, false)
			o.timers.add("t")
			p.h.sched.Schedule(timerKey(o, "t"), passStart.Add(time.Hour))
			p.see(sized("1", 1, "red"), watchDeleted, false)
			p.r.reconcile(context.Background(), o.uid)
			if o.timers.has("t") {
				t.Error("the timer still runs")
			}
			if _, scheduled := p.h.sched.Scheduled(timerKey(o, "t")); scheduled {
				t.Error("its tick is still scheduled")
			}
			p.h.mu.Lock()
			_, kept := p.h.objects[o.uid]
			p.h.mu.Unlock()
			if kept != tc.kept {
				t.Errorf("kept %v, want %v", kept, tc.kept)
			}
		})
	}
}
