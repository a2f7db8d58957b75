package chaos

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// inject plays one planned fault and heals it, and returns it as it
// happened. It returns once the fault is healed.
func (r *run) inject(ctx context.Context, p Planned) (Fault, error) {
	f := Fault{At: time.Now(), Kind: p.Kind, Target: p.Target}
	var err error
	switch p.Kind {
	case FaultHandlerKill:
		h := r.handlers[p.Target]
		h.kill()
		wait(ctx, p.For)
		err = h.start()
	case FaultHandlerStop:
		h := r.handlers[p.Target]
		if err = h.signal(syscall.SIGSTOP); err == nil {
			wait(ctx, p.For)
			err = h.signal(syscall.SIGCONT)
		}
	case FaultLeaderKill:
		var b *proc
		if b, err = r.leader(ctx); err == nil {
			f.Target = b.name
			b.kill()
			wait(ctx, p.For)
			err = b.start()
		}
	case FaultAPIRestart:
		err = r.cp.RestartAPIServer(ctx)
	case FaultNetLatency:
		f.Detail = p.Latency.String()
		err = r.toxicFor(ctx, p.Target, "latency", fmt.Sprintf(`{"latency":%d,"jitter":%d}`, p.Latency.Milliseconds(), p.Latency.Milliseconds()/4), p.For)
	case FaultNetReset:
		err = r.toxicFor(ctx, p.Target, "reset_peer", `{"timeout":0}`, 300*time.Millisecond)
	case FaultNetBlackhole:
		err = r.toxicFor(ctx, p.Target, "timeout", `{"timeout":0}`, p.For)
	case FaultHandlerRollout:
		err = r.rollout(ctx)
	default:
		err = fmt.Errorf("unknown fault kind %q", p.Kind)
	}
	f.Healed = time.Now()
	if err != nil {
		return f, fmt.Errorf("fault %s: %w", p, err)
	}
	return f, nil
}

// wait waits d or until ctx ends.
func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func (r *run) toxicFor(ctx context.Context, link, typ, attributes string, d time.Duration) error {
	heal, err := r.links.toxic(link, typ, attributes)
	if err != nil {
		return err
	}
	wait(ctx, d)
	heal()
	return nil
}

// leader is the broker replica that holds the leader Lease.
func (r *run) leader(ctx context.Context) (*proc, error) {
	lease, err := r.cp.Client().CoordinationV1().Leases(brokerNamespace).Get(ctx, "tether-broker-leader", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the leader Lease: %w", err)
	}
	if id := lease.Spec.HolderIdentity; id != nil {
		if b := r.brokers[*id]; b != nil {
			return b, nil
		}
	}
	return nil, fmt.Errorf("no broker leads (the Lease names %v)", lease.Spec.HolderIdentity)
}

// rollout replaces every handler instance, one after the other, by one
// with the other variant of the bindings, as a Deployment's rolling update
// to a new release would: the new instances are refused until the last old
// one has left, then take over.
func (r *run) rollout(ctx context.Context) error {
	r.variant = 3 - r.variant
	for _, name := range r.handlerNames {
		h := r.handlers[name]
		h.terminate()
		h.args = r.handlerArgs(name)
		if err := h.start(); err != nil {
			return err
		}
		wait(ctx, time.Second)
	}
	return nil
}

// handlerArgs are the flags of a handler instance.
func (r *run) handlerArgs(name string) []string {
	return []string{"--brokers", r.handlerBrokers, "--namespace", loadNamespace, "--instance", name,
		"--grace", r.opts.Grace.String(), "--variant", strconv.Itoa(r.variant)}
}
