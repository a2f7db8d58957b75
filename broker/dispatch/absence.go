package dispatch

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/presence"
)

// errAbsent ends a wait for an instance once the handler is past its grace.
var errAbsent = errors.New("handler is absent")

// errObjectChanged ends a wait for an instance when the object changed.
var errObjectChanged = errors.New("the object changed while waiting for an instance")

func (rt *runtime) setLimits(grace, absentAfter time.Duration) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.grace, rt.absentAfter = grace, absentAfter
	rt.pokePresence()
}

// absenceLocked is what the handler's presence is worked out from; rt.mu
// must be held.
func (rt *runtime) absenceLocked() contract.Absence {
	return contract.Absence{
		Connected: rt.pool.len() > 0, Since: rt.absentSince, Accepting: rt.m.acceptingSince(),
		Grace: rt.grace, ReleaseAfter: rt.absentAfter,
	}
}

// presence is where the handler stands now.
func (rt *runtime) presence() contract.Presence {
	rt.mu.Lock()
	a := rt.absenceLocked()
	rt.mu.Unlock()
	p, _ := a.At(time.Now())
	return p
}

func (rt *runtime) pokePresence() {
	select {
	case rt.presenceWake <- struct{}{}:
	default:
	}
}

// presenceLoop keeps the handler's Lease current and acts on the moments
// its grace and absent_release_after run out: every object is looked at
// again, and workers waiting for an instance are woken to release.
func (rt *runtime) presenceLoop(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	last := contract.Present
	var written presence.Record
	var put time.Time // when the Lease was last written
	var renewed time.Time
	hooks := webhookSync{rt: rt}
	for {
		now := time.Now()
		rt.mu.Lock()
		state, changes := rt.absenceLocked().At(now)
		rec := presence.Record{
			Handler: rt.name, Instances: rt.pool.len(), AbsentSince: rt.absentSince,
			Grace: rt.grace, AbsentReleaseAfter: rt.absentAfter, Bindings: rt.declared,
			Resources: rt.resources(), Sweep: slices.Clone(rt.sweep), Holder: rt.m.opts.Identity, LastSeen: written.LastSeen,
		}
		renewEvery := min(max(rt.grace/3, time.Second), 10*time.Second)
		next := renewEvery
		if !changes.IsZero() {
			next = min(next, changes.Sub(now))
		}
		rt.mu.Unlock()

		if state != last {
			rt.log.Info("handler presence changed", "presence", state)
			last = state
			rt.signalAll()
		}
		switch {
		case rec.Instances > 0 && now.Sub(renewed) >= renewEvery:
			rec.LastSeen, renewed = now, now
		case rec.LastSeen.IsZero():
			// A handler restored from its Lease was last seen when it left.
			rec.LastSeen = rec.AbsentSince
		}
		// Written again as often as a present handler's is renewed, even
		// when nothing changed: a Lease deleted while the handler is away
		// must come back, or the next broker would forget the handler and
		// its holds.
		if changedRecord(written, rec) || now.Sub(put) >= renewEvery {
			rt.writePresence(ctx, rec)
			written, put = rec, now
		}
		rt.observePresence(rec.Instances)
		if !hooks.sync(ctx, state >= contract.Absent) {
			next = min(next, webhookRetry)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-rt.presenceWake:
		case <-t.C:
		}
	}
}

func changedRecord(a, b presence.Record) bool {
	return a.Instances != b.Instances || !a.AbsentSince.Equal(b.AbsentSince) || !a.LastSeen.Equal(b.LastSeen) ||
		a.Grace != b.Grace || a.AbsentReleaseAfter != b.AbsentReleaseAfter || len(a.Bindings) != len(b.Bindings) ||
		len(a.Sweep) != len(b.Sweep)
}

func (rt *runtime) writePresence(ctx context.Context, rec presence.Record) {
	if rt.m.opts.Presence == nil {
		return
	}
	if err := rt.m.opts.Presence.Put(ctx, rec); err != nil && ctx.Err() == nil {
		rt.log.Warn("cannot record handler presence", "error", err)
	}
}

// resources lists the resources of the bindings; rt.mu need not be held.
func (rt *runtime) resources() []schema.GroupVersionResource {
	out := make([]schema.GroupVersionResource, 0, len(rt.byResource))
	for gvr := range rt.byResource {
		out = append(out, gvr)
	}
	return out
}

// signalAll wakes workers waiting for an instance and has every object
// looked at again.
func (rt *runtime) signalAll() {
	rt.pool.signal()
	rt.mu.Lock()
	uids := make([]types.UID, 0, len(rt.objects))
	for uid := range rt.objects {
		uids = append(uids, uid)
	}
	rt.mu.Unlock()
	for _, uid := range uids {
		rt.queue.Add(uid)
	}
}

// processAbsent handles a live object while the handler is absent past its
// grace: nothing is delivered, and once it is absent past
// absent_release_after the hold is stripped (rule 3d), paced by the release
// limiter, to be added again on return. Objects being deleted are
// processDeletion's.
func (rt *runtime) processAbsent(ctx context.Context, o *object, obj *unstructured.Unstructured, p contract.Presence) error {
	held := hold.Has(obj, rt.name)
	dec := contract.Decide(contract.Object{Held: held, Policy: rt.policy(rt.byResource[o.res.GroupVersionResource], obj)}, p)
	if dec.Action != contract.Release {
		return nil
	}
	if dec.Rule == contract.RuleLongAbsent {
		// Waiting for the turn frees the worker (see WriteLimiter): releases
		// of objects being deleted must not queue behind these.
		if wait := rt.writes.releaseTurn(o); wait > 0 {
			return &pacedWrite{wait: wait}
		}
	}
	return rt.writes.apply(ctx, o, obj, rt.releaseWrite(dec.Rule))
}

// webhookRetry is how soon a failed write of a handler's webhook
// configurations is tried again.
const webhookRetry = 2 * time.Second

// webhookSync writes a handler's webhook configurations when its presence
// calls for another state than the one written: at start (which also
// removes those of admission bindings the handler no longer has) and when
// it passes its grace or returns.
type webhookSync struct {
	rt      *runtime
	done    bool
	written bool // the absent state written
}

// sync reports false when the write failed and should be tried again.
func (w *webhookSync) sync(ctx context.Context, absent bool) bool {
	hooks := w.rt.m.opts.Webhooks
	if hooks == nil || (w.done && w.written == absent) {
		return true
	}
	if err := hooks.Sync(ctx, w.rt.name, w.rt.bindings, absent); err != nil {
		if ctx.Err() == nil {
			w.rt.log.Warn("cannot write the handler's webhook configurations; retrying", "absent", absent, "error", err)
		}
		return false
	}
	w.done, w.written = true, absent
	return true
}
