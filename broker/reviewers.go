package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultAdmissionReadyWait is Admission.ReadyWait unless set: about the
// time the SDKs take to find a new replica (they look the replicas' name
// up every 5 s) and sign in to it.
const DefaultAdmissionReadyWait = 10 * time.Second

// reviewersGate keeps a replica that starts from reporting ready until an
// instance of each handler whose webhooks point at every replica has a
// session to it, for at most a wait. Once ready, the API server may send
// this replica any review of such a handler; without an instance here, it
// would wait out its deadline or be refused. The SDKs find a replica before
// it is ready (the headless Service publishes not-ready addresses), so the
// wait is usually the time they take to sign in.
type reviewersGate struct {
	log hclog.Logger
	// connected reports whether the handler has an instance here.
	connected func(handler string) bool
	now       func() time.Time

	mu       sync.Mutex
	deadline time.Time
	want     []string // read once read is true
	read     bool
	open     bool // stays open once open
}

func newReviewersGate(wait time.Duration, connected func(string) bool, now func() time.Time, log hclog.Logger) *reviewersGate {
	return &reviewersGate{log: log, connected: connected, now: now, deadline: now().Add(wait)}
}

// readWanted reads which handlers to wait for; on an error the gate opens,
// since a replica must not stay out of service for want of a list.
func (g *reviewersGate) readWanted(ctx context.Context, everyReplica func(context.Context) ([]string, error)) {
	want, err := everyReplica(ctx)
	g.mu.Lock()
	defer g.mu.Unlock()
	if err != nil {
		g.log.Warn("cannot read which handlers answer reviews on every replica; ready without waiting for them", "error", err)
		g.open = true
		return
	}
	g.want, g.read = want, true
}

// notReady says why the replica is not ready yet; "" once it may be.
func (g *reviewersGate) notReady() string {
	if g == nil {
		return ""
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open {
		return ""
	}
	now := g.now()
	missing := waitingFor(g.read, g.want, g.connected)
	switch {
	case missing == "":
		g.open = true
		return ""
	case !now.Before(g.deadline):
		g.open = true
		g.log.Warn("ready although handlers that answer reviews on every replica have no instance here yet: "+
			"their reviews sent here wait for one", "handlers", missing)
		return ""
	}
	return fmt.Sprintf("waiting up to %v more for an instance of %s", g.deadline.Sub(now).Round(time.Second), missing)
}

// waitingFor names what a replica that starts still waits for before it is
// ready to answer reviews: the list of handlers to wait for, until read,
// then each of them without an instance connected; "" when nothing.
func waitingFor(read bool, want []string, connected func(string) bool) string {
	if !read {
		return "the list of handlers that answer reviews on every replica"
	}
	var missing []string
	for _, h := range want {
		if !connected(h) {
			missing = append(missing, "handler "+h)
		}
	}
	return strings.Join(missing, ", ")
}

// gateReviewers makes the gate of Admission.ReadyWait and puts it in the
// readiness; nil when no webhook points at every replica or the wait is
// off.
func (p *parts) gateReviewers() *reviewersGate {
	a := p.opts.Admission
	wait := a.ReadyWait
	if wait == 0 {
		wait = DefaultAdmissionReadyWait
	}
	if (a.ReplicasURL == "" && a.ReplicasService == "") || wait < 0 {
		return nil
	}
	gate := newReviewersGate(wait, p.dispatcher.Connected, time.Now, p.log.Named("ready"))
	p.health.reviewers.Store(gate)
	return gate
}
