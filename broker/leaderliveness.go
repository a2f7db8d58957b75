package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/kube"
)

// leaseAccess reads and writes the leader Lease; Update fails with a
// Conflict when the Lease changed since it was read.
type leaseAccess interface {
	Get(ctx context.Context) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease) error
}

type leaseClient struct {
	leases kube.Resource[*coordinationv1.Lease, *coordinationv1.LeaseList]
	name   string
}

func (c leaseClient) Get(ctx context.Context) (*coordinationv1.Lease, error) {
	return c.leases.Get(ctx, c.name, metav1.GetOptions{})
}

func (c leaseClient) Update(ctx context.Context, lease *coordinationv1.Lease) error {
	_, err := c.leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// probeTimeout bounds one probe; a probe that times out is no evidence.
const probeTimeout = time.Second

// probeTCP connects to addr and says whether it answered or refused.
func probeTCP(ctx context.Context, addr string) probeOutcome {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
	switch {
	case err == nil:
		conn.Close()
		return probeAnswered
	case errors.Is(err, syscall.ECONNREFUSED):
		return probeRefused
	}
	return probeUnknown
}

// livenessListener listens on addr (HOST, for a port of the system's
// choosing, or HOST:PORT) for as long as the process lives: the broker
// closes it only once it stopped writing, so a refused connection says the
// process is gone. It accepts connections and closes them at once.
func livenessListener(addr string) (net.Listener, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		addr = net.JoinHostPort(addr, "0")
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listening for liveness probes on %s: %w", addr, err)
	}
	go func() {
		for {
			conn, err := lis.Accept()
			if err != nil {
				return
			}
			conn.Close()
		}
	}()
	return lis, nil
}

// livenessAddress is where the liveness listener listens: the configured
// address, else the gRPC listener's IP when it is a specific one (an
// unspecified one, 0.0.0.0, says nothing about where other replicas reach
// this one). Empty: no liveness listener, so no early takeover of this
// replica.
func livenessAddress(configured string, grpc net.Addr) string {
	if configured != "" {
		return configured
	}
	tcp, ok := grpc.(*net.TCPAddr)
	if !ok || tcp.IP == nil || tcp.IP.IsUnspecified() {
		return ""
	}
	return tcp.IP.String()
}

// earlyTakeover is a follower's side of an early takeover: it watches the
// liveness address the leader published on the Lease (the leader's side is
// markedLeaseLock).
type earlyTakeover struct {
	leases leaseAccess
	self   string
	every  time.Duration
	probe  func(context.Context, string) probeOutcome
	clock  clock.WithTicker
	log    hclog.Logger
}

// watch, until ctx ends, looks at the leader Lease every e.every and takes
// it from its holder when decideTakeover finds its process gone. It goes
// on after a takeover: another follower may have won the Lease.
func (e *earlyTakeover) watch(ctx context.Context) {
	var w watched
	t := e.clock.NewTicker(e.every)
	defer t.Stop()
	for {
		// At once: a follower restarted just before the leader dies
		// has seen its address answer only if it looked.
		e.once(ctx, &w)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// watched is what a follower remembers between looks at the Lease.
type watched struct {
	answered livenessMark // the last mark whose address answered this replica
	warned   livenessMark // the last mark it said it cannot trust a refusal of
}

// once is one look at the Lease, and a takeover if its holder is gone.
func (e *earlyTakeover) once(ctx context.Context, w *watched) {
	lease, err := e.leases.Get(ctx)
	if err != nil {
		return
	}
	m, ok := markOf(lease)
	if !ok || holderOf(lease) == e.self {
		return
	}
	var probes []probeOutcome
	for range minRefusalsToTrust {
		p := e.probe(ctx, m.Address)
		probes = append(probes, p)
		if p == probeAnswered && w.answered != m {
			w.answered = m
			e.log.Info("the leader's liveness address answers: if its process exits, this replica takes over without waiting for the Lease to expire",
				"leader", m.Holder, "address", m.Address)
		}
		if p != probeRefused {
			break
		}
	}
	take, why := decideTakeover(takeoverInput{Lease: lease, Self: e.self, AnsweredBefore: w.answered == m, Probes: probes, Now: e.clock.Now()})
	if !take {
		// A refusal it cannot trust is worth saying once: the operator
		// may wonder why this replica waits for the Lease.
		if why == reasonNeverAnswer && w.warned != m {
			w.warned = m
			e.log.Info("the leader's liveness address refuses connections, but that is no evidence its process exited: waiting for the Lease to expire",
				"leader", m.Holder, "address", m.Address, "reason", why)
		}
		return
	}
	if err := e.leases.Update(ctx, released(lease, e.clock.Now())); err != nil {
		e.log.Info("could not release the Lease of a leader whose process exited", "leader", m.Holder, "error", err)
		return
	}
	e.log.Info("released the Lease of a leader whose process exited, without waiting for it to expire",
		"leader", m.Holder, "address", m.Address, "reason", why)
}
