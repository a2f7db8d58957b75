package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/kube"
)

// LeaderElection configures how broker replicas elect the one that
// watches, dispatches and writes. The others serve gRPC only to refuse
// Connect with Unavailable, which tells handlers to retry (through the
// Service, which routes to the Pod labelled LeaderLabel: the leader).
type LeaderElection struct {
	// Enabled turns election on; without it every broker leads (one replica).
	Enabled bool
	// LeaseName is the coordination.k8s.io Lease in the broker's namespace
	// (DefaultLeaseName).
	LeaseName string
	// LeaseDuration (DefaultLeaseDuration), RenewDeadline (10 s at most) and
	// RetryPeriod (2 s at most) mean what they mean for client-go's elector
	// (elector.go); a follower takes over within about LeaseDuration of the
	// leader's death, or within a few RetryPeriods when it sees the
	// leader's process gone (leadergone.go).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// LivenessAddress is HOST or HOST:PORT, where other replicas reach
	// this one. While this replica leads, the address there that its
	// process listens on for as long as it lives (a port of the system's
	// choosing unless given) is published on the Lease; a follower that
	// finds it refusing connections takes over without waiting for the
	// Lease to expire. Default: the gRPC listener's IP, unless it is
	// unspecified (0.0.0.0, ::); then, and with "-", no early takeover of
	// this replica.
	LivenessAddress string
	// ColdStandby keeps followers from watching: they then cache nothing
	// (less memory, half the watches on the API server), and a takeover
	// lists every object again before it is ready. By default a follower
	// keeps the informers of the handlers recorded in the presence Leases
	// warm.
	ColdStandby bool
	// Pod is the broker's own Pod in its namespace. While this replica
	// leads (once synced) the Pod carries LeaderLabel; a replica that starts
	// takes the label off first, in case its Pod led before a restart.
	// Empty: no label (a broker outside a Pod).
	Pod string
}

// The defaults of LeaderElection.
const (
	DefaultLeaseName     = "tether-broker-leader"
	DefaultLeaseDuration = 15 * time.Second
)

func (l LeaderElection) withDefaults() LeaderElection {
	if l.LeaseName == "" {
		l.LeaseName = DefaultLeaseName
	}
	if l.LeaseDuration <= 0 {
		l.LeaseDuration = DefaultLeaseDuration
	}
	if l.RenewDeadline <= 0 {
		l.RenewDeadline = min(10*time.Second, l.LeaseDuration*2/3)
	}
	if l.RetryPeriod <= 0 {
		l.RetryPeriod = min(2*time.Second, l.RenewDeadline/2)
	}
	return l
}

// validate refuses timings under which a leader could lose the Lease
// between two renewals, as client-go's elector does.
func (l LeaderElection) validate() error {
	switch {
	case l.LeaseDuration <= l.RenewDeadline:
		return errors.New("the lease duration must be longer than the renew deadline")
	case l.RenewDeadline <= time.Duration(retryJitter*float64(l.RetryPeriod)):
		return fmt.Errorf("the renew deadline must be longer than %v retry periods", retryJitter)
	case l.RetryPeriod <= 0:
		return errors.New("the retry period must be above 0")
	}
	return nil
}

// errLostLeadership ends a broker that stopped leading while it was meant
// to go on: it exits, and its restart becomes a follower.
var errLostLeadership = errors.New("lost the leader lease")

// election is what it takes to hold the leader Lease.
type election struct {
	kube                kube.Interface
	namespace, identity string
	// livenessAddress is where this process listens for as long as it
	// lives; empty: nowhere. While leading, it is published on the Lease
	// with each renewal (markedLeaseLock); while following, the leader's is
	// watched.
	livenessAddress string
	cfg             LeaderElection
	// tenure, when set, is renewed with each write of the Lease that
	// succeeds; the sessions fence lifecycle deliveries with it.
	tenure *tenure
	log    hclog.Logger
}

// run runs work while this replica holds the leader Lease. It returns nil
// when ctx ends, and errLostLeadership when the Lease was lost first. work
// must return when its context ends; lead waits for it, so that the Lease
// is released only after this replica stopped writing.
func (el election) run(ctx context.Context, work func(context.Context)) error {
	cfg, identity, log := el.cfg.withDefaults(), el.identity, el.log
	leases := el.kube.CoordinationV1().Leases(el.namespace)
	early := &earlyTakeover{
		leases: leaseClient{leases: leases, name: cfg.LeaseName}, self: identity, every: cfg.RetryPeriod / 2,
		probe: probeTCP, clock: clock.RealClock{}, log: log,
	}
	// While following, watch the leader's liveness address. Its release
	// of a dead leader's Lease is conditional on the Lease it read, so one
	// still under way when this replica leads fails harmlessly.
	following, stopFollowing := context.WithCancel(ctx)
	watching := make(chan struct{})
	go func() {
		defer close(watching)
		early.watch(following)
	}()
	defer func() {
		stopFollowing()
		<-watching
	}()
	if err := cfg.validate(); err != nil {
		return fmt.Errorf("setting up leader election: %w", err)
	}
	lock := &markedLeaseLock{leases: leases, namespace: el.namespace, name: cfg.LeaseName, identity: identity, address: el.livenessAddress}
	// The elector releases the Lease when its context ends; it must end
	// only after work stopped, or two replicas could write at once.
	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	done := make(chan struct{})
	started := make(chan struct{})
	e := &elector{
		lock:          lock,
		tenure:        el.tenure,
		leaseDuration: cfg.LeaseDuration,
		renewDeadline: cfg.RenewDeadline,
		retryPeriod:   cfg.RetryPeriod,
		clock:         clock.RealClock{},
		log:           log,
		onStarted: func(lctx context.Context) {
			close(started)
			defer close(done)
			stopFollowing()
			log.Info("leading: this replica watches, dispatches and writes", "identity", identity)
			wctx, cancel := context.WithCancel(ctx)
			defer cancel()
			stop := context.AfterFunc(lctx, cancel)
			defer stop()
			work(wctx)
		},
		onStopped: func() { log.Info("no longer leading", "identity", identity) },
		onNewLeader: func(id string) {
			if id != identity {
				log.Info("following", "leader", id)
			}
		},
	}
	go func() {
		<-ctx.Done()
		select {
		case <-started:
			<-done
		default:
		}
		stopRun()
	}()
	e.run(runCtx)
	select {
	case <-started:
		<-done
	default:
	}
	if ctx.Err() != nil {
		return nil
	}
	return errLostLeadership
}
