package broker

import (
	"bytes"
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/clock"
)

// The broker elects its leader as client-go's leaderelection package does
// (the same Lease fields, timings, release on the way out), but on its own:
// that package imports client-go's shared informers, and with them the
// whole clientset and its scheme (package kube says what that costs).

// leaderRecord is what the Lease's spec says of the tenure.
type leaderRecord struct {
	HolderIdentity       string      `json:"holderIdentity"`
	LeaseDurationSeconds int         `json:"leaseDurationSeconds"`
	AcquireTime          metav1.Time `json:"acquireTime"`
	RenewTime            metav1.Time `json:"renewTime"`
	LeaderTransitions    int         `json:"leaderTransitions"`
}

func recordOf(spec *coordinationv1.LeaseSpec) leaderRecord {
	var r leaderRecord
	if spec.HolderIdentity != nil {
		r.HolderIdentity = *spec.HolderIdentity
	}
	if spec.LeaseDurationSeconds != nil {
		r.LeaseDurationSeconds = int(*spec.LeaseDurationSeconds)
	}
	if spec.LeaseTransitions != nil {
		r.LeaderTransitions = int(*spec.LeaseTransitions)
	}
	if spec.AcquireTime != nil {
		r.AcquireTime = metav1.Time{Time: spec.AcquireTime.Time}
	}
	if spec.RenewTime != nil {
		r.RenewTime = metav1.Time{Time: spec.RenewTime.Time}
	}
	return r
}

func (r leaderRecord) spec() coordinationv1.LeaseSpec {
	duration, transitions := int32(r.LeaseDurationSeconds), int32(r.LeaderTransitions)
	return coordinationv1.LeaseSpec{
		HolderIdentity:       &r.HolderIdentity,
		LeaseDurationSeconds: &duration,
		AcquireTime:          &metav1.MicroTime{Time: r.AcquireTime.Time},
		RenewTime:            &metav1.MicroTime{Time: r.RenewTime.Time},
		LeaseTransitions:     &transitions,
	}
}

// retryJitter spreads the tries of followers: up to 1.2 retry periods more.
const retryJitter = 1.2

// elector holds the leader Lease through lock: it tries every RetryPeriod
// until it holds it, then renews it every RetryPeriod, and stops leading
// when no renewal succeeded for RenewDeadline.
type elector struct {
	lock                                      *markedLeaseLock
	tenure                                    *tenure // nil: none kept
	leaseDuration, renewDeadline, retryPeriod time.Duration
	clock                                     clock.Clock
	log                                       hclog.Logger
	onStarted                                 func(context.Context)
	onStopped                                 func()
	onNewLeader                               func(string)

	// observed is the record last read or written, at observedAt;
	// observedRaw its encoding when read, to tell a change.
	observed    leaderRecord
	observedRaw []byte
	observedAt  time.Time
	reported    string // the leader last given to onNewLeader
}

// run leads until ctx ends or the Lease is lost, then releases the Lease
// (a follower takes it on its next try, not when it expires).
func (e *elector) run(ctx context.Context) {
	defer e.onStopped()
	if !e.acquire(ctx) {
		return
	}
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go e.onStarted(lctx)
	e.renew(lctx)
}

func (e *elector) acquire(ctx context.Context) bool {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	acquired := false
	wait.JitterUntilWithContext(ctx, func(ctx context.Context) {
		acquired = e.tryAcquireOrRenew(ctx)
		e.reportLeader()
		if acquired {
			cancel()
		}
	}, e.retryPeriod, retryJitter, true)
	return acquired
}

func (e *elector) renew(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		err := wait.PollUntilContextTimeout(ctx, e.retryPeriod, e.renewDeadline, true, func(ctx context.Context) (bool, error) {
			if err := ctx.Err(); err != nil {
				return false, err
			}
			return e.tryAcquireOrRenew(ctx), nil
		})
		e.reportLeader()
		if err != nil {
			e.log.Warn("could not renew the leader Lease", "lease", e.lock.Describe(), "error", err)
			cancel()
		}
	}, e.retryPeriod)
	rctx, rcancel := context.WithTimeout(context.Background(), e.renewDeadline)
	defer rcancel()
	e.release(rctx)
}

func (e *elector) leading() bool { return e.observed.HolderIdentity == e.lock.Identity() }

// valid: the record observed has not expired, as seen from here.
func (e *elector) valid(now time.Time) bool {
	return e.observedAt.Add(time.Duration(e.observed.LeaseDurationSeconds) * time.Second).After(now)
}

func (e *elector) observe(r leaderRecord) {
	e.observed, e.observedAt = r, e.clock.Now()
}

// tryAcquireOrRenew writes this replica's tenure on the Lease: a renewal
// while it leads, the Lease taken when no one holds it or its holder let
// it expire. A write that succeeded renews the tenure from when it was
// sent: the Lease may have been written at any moment after.
func (e *elector) tryAcquireOrRenew(ctx context.Context) bool {
	sent := e.clock.Now()
	ok := e.writeLease(ctx, metav1.NewTime(sent))
	if ok && e.tenure != nil {
		e.tenure.renewed(sent)
	}
	return ok
}

// writeLease is tryAcquireOrRenew's write, stamped now.
func (e *elector) writeLease(ctx context.Context, now metav1.Time) bool {
	want := leaderRecord{HolderIdentity: e.lock.Identity(), LeaseDurationSeconds: int(e.leaseDuration / time.Second), AcquireTime: now, RenewTime: now}
	// The leader first writes on the Lease as it last saw it: one request.
	if e.leading() && e.valid(now.Time) {
		want.AcquireTime, want.LeaderTransitions = e.observed.AcquireTime, e.observed.LeaderTransitions
		err := e.lock.Update(ctx, want)
		if err == nil {
			e.observe(want)
			return true
		}
		e.log.Debug("renewing the leader Lease on the Lease last seen failed; reading it", "error", err)
	}
	have, raw, err := e.lock.Get(ctx)
	if err != nil {
		if !apierrors.IsNotFound(err) {
			e.log.Warn("cannot read the leader Lease", "lease", e.lock.Describe(), "error", err)
			return false
		}
		if err := e.lock.Create(ctx, want); err != nil {
			e.log.Warn("cannot create the leader Lease", "lease", e.lock.Describe(), "error", err)
			return false
		}
		e.observe(want)
		return true
	}
	if !bytes.Equal(e.observedRaw, raw) {
		e.observe(have)
		e.observedRaw = raw
	}
	if have.HolderIdentity != "" && e.valid(now.Time) && !e.leading() {
		return false
	}
	if e.leading() {
		want.AcquireTime, want.LeaderTransitions = have.AcquireTime, have.LeaderTransitions
	} else {
		want.LeaderTransitions = have.LeaderTransitions + 1
	}
	if err := e.lock.Update(ctx, want); err != nil {
		e.log.Debug("cannot write the leader Lease", "lease", e.lock.Describe(), "error", err)
		return false
	}
	e.observe(want)
	return true
}

// release gives the Lease up: no holder, a one-second duration, the
// transitions kept; retried on a conflict.
func (e *elector) release(ctx context.Context) bool {
	if e.tenure != nil {
		e.tenure.end()
	}
	have, _, err := e.lock.Get(ctx)
	if err != nil {
		e.log.Warn("cannot read the leader Lease to release it", "lease", e.lock.Describe(), "error", err)
		return false
	}
	if !e.leading() {
		return true
	}
	now := metav1.NewTime(e.clock.Now())
	out := leaderRecord{LeaderTransitions: have.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now}
	if err := e.lock.Update(ctx, out); err != nil {
		if apierrors.IsConflict(err) && ctx.Err() == nil {
			return e.release(ctx)
		}
		e.log.Warn("cannot release the leader Lease", "lease", e.lock.Describe(), "error", err)
		return false
	}
	e.observe(out)
	return true
}

// reportLeader tells onNewLeader of a holder other than the last told.
func (e *elector) reportLeader() {
	if e.observed.HolderIdentity == e.reported {
		return
	}
	e.reported = e.observed.HolderIdentity
	if e.onNewLeader != nil {
		go e.onNewLeader(e.reported)
	}
}
