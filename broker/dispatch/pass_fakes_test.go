package dispatch

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/jsonpatch"
	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/timer"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The unit tests of the reconcile pass drive the real reconciler with a
// fake delivery (answers by binding, in order) and a fake writer (lands
// each write on the object as the API server would, or answers what the
// test says), on a fake clock.

// passStart is when the fake clock of a pass test starts.
var passStart = time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)

var passResource = resource.Resource{
	GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"},
	Kind:                 "Widget",
}

// fakeDelivery answers each binding's deliveries with its replies in turn,
// the last one again once they run out; a binding without replies is
// answered OK by instance a.
type fakeDelivery struct {
	sent    []delivered
	replies map[string][]reply
	// during, when set, runs while a delivery is under way: what the
	// informer or the instances do meanwhile.
	during func(b *binding.Binding)
}

// delivered is one delivery the pass made.
type delivered struct {
	binding string
	d       *tetherv1.Delivery
}

var instanceA = &session.Instance{Handler: "h", ID: "a"}

func (f *fakeDelivery) call(_ context.Context, _ *object, b *binding.Binding, d *tetherv1.Delivery) reply {
	f.sent = append(f.sent, delivered{b.ID, d})
	if f.during != nil {
		f.during(b)
	}
	rs := f.replies[b.ID]
	if len(rs) == 0 {
		return ok()
	}
	if len(rs) > 1 {
		f.replies[b.ID] = rs[1:]
	}
	return rs[0]
}

// kinds lists the deliveries made, as "kind binding".
func (f *fakeDelivery) kinds() []string {
	var out []string
	for _, s := range f.sent {
		out = append(out, kindLabel(s.d.GetKind())+" "+s.binding)
	}
	return out
}

// ok is an OK ack from instance a, with patch when given.
func ok(patch ...string) reply {
	ack := &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_OK}
	if len(patch) > 0 {
		ack.Patch = []byte(patch[0])
	}
	return reply{ack: ack, in: instanceA}
}

func failAck() reply {
	return reply{ack: &tetherv1.Ack{Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: "no"}, in: instanceA}
}

// fakeWriter lands each write on the object, unless answers says otherwise
// for it (in turn): a wait for its turn, or an error.
type fakeWriter struct {
	h       *handler
	writes  []write
	answers []writeAnswer
	// releaseWait is how long a release of a long-absent handler waits.
	releaseWait time.Duration
	// ahead, when set, is the object as the API server has it after a
	// change the informer has not shown yet: the next write lands on it.
	ahead *unstructured.Unstructured
}

type writeAnswer struct {
	wait time.Duration
	err  error
}

func (f *fakeWriter) apply(_ context.Context, o *object, w *write) (time.Duration, error) {
	o.work.pending = w
	f.writes = append(f.writes, *w)
	if len(f.answers) > 0 {
		a := f.answers[0]
		f.answers = f.answers[1:]
		if a.wait > 0 || a.err != nil {
			return a.wait, a.err
		}
	}
	o.work.pending = nil
	if w.lastHandled != nil {
		o.work.lastHandled = w.lastHandled
	}
	f.land(o, w)
	return 0, nil
}

func (f *fakeWriter) releaseTurn(*object) time.Duration { return f.releaseWait }

// land makes the object what w makes of it, at the next resourceVersion,
// as remember does with the API server's answer.
func (f *fakeWriter) land(o *object, w *write) {
	after := jsonpatch.ApplyMerge(o.decoded().Object, objectMerge(o, w))
	obj := o.decoded().DeepCopy()
	if f.ahead != nil {
		obj, f.ahead = f.ahead, nil
	}
	obj.Object = jsonpatch.ApplyMerge(obj.Object, objectMerge(o, w))
	fins := obj.GetFinalizers()
	if w.addHold && !hold.Has(obj, f.h.name) {
		fins = append(fins, hold.Finalizer(f.h.name))
	}
	if w.removeHold {
		fins = slices.DeleteFunc(fins, func(s string) bool { return s == hold.Finalizer(f.h.name) })
	}
	obj.SetFinalizers(fins)
	rv, _ := strconv.Atoi(obj.GetResourceVersion())
	obj.SetResourceVersion(strconv.Itoa(rv + 1))
	c, err := informer.Encode(obj)
	if err != nil {
		panic(err)
	}
	o.work.wrote = written{answer: c, after: after}
	f.h.mu.Lock()
	defer f.h.mu.Unlock()
	if c.NewerThan(o.obj) {
		o.obj = c
	}
}

// summary lists the writes asked for, each as what it does: +hold, -hold,
// handled (the last-handled state), patch (the handler's).
func (f *fakeWriter) summary() []string {
	var out []string
	for _, w := range f.writes {
		var parts []string
		if w.addHold {
			parts = append(parts, "+hold")
		}
		if w.removeHold {
			parts = append(parts, "-hold")
		}
		if w.lastHandled != nil {
			parts = append(parts, "handled")
		}
		if len(w.handlerPatch) > 0 {
			parts = append(parts, "patch")
		}
		out = append(out, strings.Join(parts, " "))
	}
	return out
}

// eventLog records the reasons of the Events posted.
type eventLog struct{ reasons []string }

func (e *eventLog) Event(_ *unstructured.Unstructured, _ bool, reason, _ string) {
	e.reasons = append(e.reasons, reason)
}

// passTest is one handler "h" with a reconciler on fakes.
type passTest struct {
	t      *testing.T
	h      *handler
	r      *reconciler
	dl     *fakeDelivery
	w      *fakeWriter
	events *eventLog
	clk    *clocktesting.FakeClock
}

// newPassTest is handler h with bindings bs on widgets, one instance
// connected.
func newPassTest(t *testing.T, bs ...*binding.Binding) *passTest {
	t.Helper()
	clk := clocktesting.NewFakeClock(passStart)
	events := &eventLog{}
	opts := &Options{Recorder: events, HandlerEvents: nopHandlerEvents{}, Clock: clk, Workers: 2, MaxRawEvents: 16}
	for _, b := range bs {
		b.Resource = passResource
	}
	h := newHandler(opts, hclog.NewNullLogger(), "h", bs)
	h.presence = &presenceKeeper{handler: h, accepting: func() time.Time { return passStart }, wake: make(chan struct{}, 1)}
	h.pool.add(instanceA)
	h.sched = timer.New(func(timer.Key, time.Time) {}, clk)
	dl := &fakeDelivery{replies: map[string][]reply{}}
	fw := &fakeWriter{h: h}
	r := &reconciler{handler: h, deliver: dl, writer: fw, events: &rawEvents{handler: h, deliver: dl},
		timers: &timers{handler: h, deliver: dl}, daemons: &daemons{handler: h, deliver: &deliverer{handler: h}}}
	return &passTest{t: t, h: h, r: r, dl: dl, w: fw, events: events, clk: clk}
}

// absent makes the handler have no instance since the start, with a grace
// of a second and, when long is set, absent_release_after of two; the
// clock is then past both.
func (p *passTest) absent(long bool) {
	k := p.h.presence
	k.pool.remove(instanceA)
	k.mu.Lock()
	k.absentSince, k.grace = passStart, time.Second
	if long {
		k.absentAfter = 2 * time.Second
	}
	k.mu.Unlock()
	p.clk.SetTime(passStart.Add(3 * time.Second))
}

// see has the informer see obj, as controller.observe does.
func (p *passTest) see(obj *unstructured.Unstructured, typ string, initial bool) *object {
	p.t.Helper()
	c := cached(p.t, obj)
	p.h.mu.Lock()
	defer p.h.mu.Unlock()
	o := p.h.objects[c.UID]
	if o == nil {
		o = &object{uid: c.UID, res: &passResource}
		p.h.objects[c.UID] = o
	}
	keepRaw := slices.ContainsFunc(p.h.bindings, func(b *binding.Binding) bool { return b.Kind == binding.Event })
	o.see(c, typ, initial, keepRaw, p.h.opts.MaxRawEvents, p.clk.Now(), p.h.log)
	select {
	case o.seen <- struct{}{}:
	default:
	}
	return o
}

// begin starts a pass on o by hand, for the tests that call a part of the
// pass: its work, and its state loaded.
func (p *passTest) begin(o *object) {
	p.h.mu.Lock()
	o.seen = make(chan struct{}, 1)
	o.begin()
	p.h.mu.Unlock()
	p.r.load(o)
}

// bind is a binding of kind with policy, retried twice with a backoff of
// one second doubling up to four.
func bind(id string, kind binding.Kind, policy binding.Policy) *binding.Binding {
	return &binding.Binding{ID: id, Kind: kind, Policy: policy,
		Retry: binding.RetryPolicy{Retries: 2, Timeout: time.Second, Backoff: time.Second, MaxBackoff: 4 * time.Second}}
}

// sized is widget ns/w (UID x) at rv with spec.size and spec.color.
func sized(rv string, size int64, color string) *unstructured.Unstructured {
	obj := widget(rv)
	obj.Object["spec"] = map[string]any{"size": size, "color": color}
	return obj
}

// held puts handler h's hold on obj.
func held(obj *unstructured.Unstructured) *unstructured.Unstructured {
	obj.SetFinalizers(append(obj.GetFinalizers(), hold.Finalizer("h")))
	return obj
}

// handledAs records essence of as as what handler h last handled on obj.
func handledAs(t *testing.T, obj, as *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	enc, err := progress.Encode(progress.Essence(as.Object))
	if err != nil {
		t.Fatal(err)
	}
	anns := obj.GetAnnotations()
	if anns == nil {
		anns = map[string]string{}
	}
	anns[progress.LastHandledKey("h")] = enc
	obj.SetAnnotations(anns)
	return obj
}

// deleting marks obj deleted, waiting for its finalizers.
func deleting(obj *unstructured.Unstructured) *unstructured.Unstructured {
	now := obj.GetCreationTimestamp()
	now.Time = passStart
	obj.SetDeletionTimestamp(&now)
	return obj
}

// timerKey is the scheduler's key of binding id's ticks on o.
func timerKey(o *object, id string) timer.Key { return timer.Key{UID: o.uid, Name: id} }
