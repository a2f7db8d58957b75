package dispatch

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/session"
	"github.com/tether-dev/tether/broker/webhook"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// presenceKeeper keeps one handler's presence: whether an instance is
// connected, since when none is, the grace and absent_release_after that
// apply, and the handler's Lease, which records all of it for the next
// broker. It acts on the moments the grace and absent_release_after run
// out, and keeps the handler's webhook configurations in step.
type presenceKeeper struct {
	*handler
	// accepting is when the broker could first accept instances: no grace
	// counts from earlier (contract.Absence).
	accepting func() time.Time
	// declared are the bindings as the handler declared them, and sweeping
	// the scopes it dropped that are still to be swept: both go into the
	// Lease.
	declared []*tetherv1.Binding
	sweeping func() []presence.Scope
	// stuck are the handler's stuck holds, for the Lease.
	stuck func() presence.Stuck
	// changed runs when the presence changes, to have every object looked
	// at again; sample records the queue's gauges.
	changed, sample func()
	wake            chan struct{}

	// recordedOK is set once the handler's Lease has been written by this
	// keeper, with the resources of its bindings (recorded).
	recordedOK atomic.Bool

	mu sync.Mutex
	// grace and absentAfter are the handler's limits; absentSince is when
	// its last instance left (zero while one is connected).
	grace, absentAfter time.Duration
	absentSince        time.Time
	// user is who the handler's instances signed in as, for the Lease: its
	// loss makes the handler an orphan (presence.Orphan).
	user presence.User
}

func (k *presenceKeeper) setLimits(grace, absentAfter time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.grace, k.absentAfter = grace, absentAfter
	k.poke()
}

func (k *presenceKeeper) limits() (grace, absentAfter time.Duration) {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.grace, k.absentAfter
}

// join makes in eligible for deliveries; it reports whether in is the only
// instance (the handler came back).
func (k *presenceKeeper) join(in *session.Instance) (returned bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	returned = k.pool.add(in)
	k.absentSince = time.Time{}
	if in.User != nil {
		k.user = presence.User{Name: in.User.Username, Groups: in.User.Groups}
	}
	k.poke()
	return returned
}

// leave stops deliveries to in; with the last instance gone the handler's
// absence starts.
func (k *presenceKeeper) leave(in *session.Instance) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.pool.remove(in) {
		k.absentSince = k.clock.Now()
		k.poke()
	}
}

// absenceLocked is what the handler's presence is worked out from; k.mu
// must be held.
func (k *presenceKeeper) absenceLocked() contract.Absence {
	return contract.Absence{
		Connected: k.pool.len() > 0, Since: k.absentSince, Accepting: k.accepting(),
		Grace: k.grace, ReleaseAfter: k.absentAfter,
	}
}

// now is where the handler stands now.
func (k *presenceKeeper) now() contract.Presence {
	k.mu.Lock()
	a := k.absenceLocked()
	k.mu.Unlock()
	p, _ := a.At(k.clock.Now())
	return p
}

func (k *presenceKeeper) poke() {
	select {
	case k.wake <- struct{}{}:
	default:
	}
}

// run keeps the handler's Lease current and acts on the moments its grace
// and absent_release_after run out: every object is looked at again, and
// workers waiting for an instance are woken to release.
func (k *presenceKeeper) run(ctx context.Context) {
	t := k.clock.NewTimer(0)
	defer t.Stop()
	last := contract.Present
	var written presence.Record
	var put time.Time // when the Lease was last written
	var renewed time.Time
	hooks := webhookSync{handler: k.handler}
	for {
		now := k.clock.Now()
		k.mu.Lock()
		state, changes := k.absenceLocked().At(now)
		rec := presence.Record{
			Handler: k.name, Instances: k.pool.len(), AbsentSince: k.absentSince,
			Grace: k.grace, AbsentReleaseAfter: k.absentAfter, Bindings: k.declared,
			Resources: k.resources(), Sweep: k.sweeping(), Holder: k.opts.Identity, LastSeen: written.LastSeen,
			User: k.user,
		}
		if k.stuck != nil {
			rec.Stuck = k.stuck()
		}
		renewEvery := min(max(k.grace/3, time.Second), 10*time.Second)
		next := renewEvery
		if !changes.IsZero() {
			next = min(next, changes.Sub(now))
		}
		k.mu.Unlock()

		if state != last {
			k.log.Info("handler presence changed", "presence", state)
			last = state
			k.pool.signal()
			k.changed()
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
			k.put(ctx, rec)
			written, put = rec, now
		}
		k.opts.Metrics.Presence().Present(k.name, rec.Instances > 0)
		k.sample()
		if !hooks.sync(ctx, state >= contract.Absent) {
			next = min(next, webhookRetry)
		}
		t.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-k.wake:
		case <-t.C():
		}
	}
}

func changedRecord(a, b presence.Record) bool {
	return a.Instances != b.Instances || !a.AbsentSince.Equal(b.AbsentSince) || !a.LastSeen.Equal(b.LastSeen) ||
		a.Grace != b.Grace || a.AbsentReleaseAfter != b.AbsentReleaseAfter || len(a.Bindings) != len(b.Bindings) ||
		len(a.Sweep) != len(b.Sweep) || a.User.Name != b.User.Name || !a.Stuck.Equal(b.Stuck)
}

// recorded reports whether the handler's Lease records it and the
// resources it binds, so that its holds can be found by the next broker;
// with no Presence store there is nothing to wait for.
func (k *presenceKeeper) recorded() bool {
	return k.opts.Presence == nil || k.recordedOK.Load()
}

func (k *presenceKeeper) put(ctx context.Context, rec presence.Record) {
	if k.opts.Presence == nil {
		return
	}
	if err := k.opts.Presence.Put(ctx, rec); err != nil {
		if ctx.Err() == nil {
			k.log.Warn("cannot record handler presence", "error", err)
		}
		return
	}
	k.recordedOK.Store(true)
}

// webhookRetry is how soon a failed write of a handler's webhook
// configurations is tried again.
const webhookRetry = 2 * time.Second

// webhookSync writes a handler's webhook configurations when its presence
// calls for another state than the one written: at start (which also
// removes those of admission bindings the handler no longer has), when it
// passes its grace or returns, and when its instances change where the
// webhooks should point (webhookTarget).
type webhookSync struct {
	*handler
	done    bool
	written bool // the absent state written
	target  webhook.Target
}

// sync reports false when the write failed and should be tried again.
func (w *webhookSync) sync(ctx context.Context, absent bool) bool {
	hooks := w.opts.Webhooks
	target := webhookTarget(w.pool)
	if hooks == nil || (w.done && w.written == absent && (target == webhook.TargetKept || target == w.target)) {
		return true
	}
	if err := hooks.SyncTo(ctx, w.name, w.bindings, absent, target); err != nil {
		if ctx.Err() == nil {
			w.log.Warn("cannot write the handler's webhook configurations; retrying", "absent", absent, "error", err)
		}
		return false
	}
	w.done, w.written = true, absent
	if target != webhook.TargetKept {
		w.target = target
	}
	return true
}

// webhookTarget is where a handler's webhooks should point given its
// instances: at every replica when each connected instance keeps a session
// to every replica (so that a follower has one to answer with), at the
// leader when one does not; with none connected, where they point.
func webhookTarget(p *pool) webhook.Target {
	ins := p.list()
	if len(ins) == 0 {
		return webhook.TargetKept
	}
	for _, in := range ins {
		if !in.Capabilities.Has(tetherv1.Capability_CAPABILITY_EVERY_REPLICA) {
			return webhook.TargetLeader
		}
	}
	return webhook.TargetEveryReplica
}
