package chaos

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/controlplane"
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
	case FaultLeaderStop:
		var b *proc
		if b, err = r.leader(ctx); err == nil {
			f.Target = b.name
			if err = b.signal(syscall.SIGSTOP); err == nil {
				wait(ctx, p.For)
				err = b.signal(syscall.SIGCONT)
			}
		}
	case FaultAPIRestart:
		err = r.cp.RestartAPIServer(ctx)
	case FaultEtcdRestart:
		err = r.cp.RestartEtcd(ctx)
	case FaultEtcdCompact:
		var rev int64
		if rev, err = r.compactAhead(ctx); rev != 0 {
			f.Detail = fmt.Sprintf("compacted at revision %d", rev)
		}
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

// etcdLink is the API server's way to etcd, through toxiproxy.
const etcdLink = "apiserver->etcd"

// compactAhead plays an etcd compaction that forces every watch to relist,
// and returns the compacted revision once the load's resources' watch
// caches have listed again.
//
// A compaction alone forces no relist: the API server serves the brokers'
// watches from its watch cache, whose events reach back past it, so
// neither a compaction nor one followed by a reset of the brokers' links
// gets a 410; one followed by an API server restart does, but for the
// restart's sake (a new cache). A compaction is felt when the API server's
// own etcd watches resume from a compacted revision, as after a partition
// from etcd while another API server wrote and compacted. So: the API
// server's link to etcd is cut (its connections closed, new ones
// refused), etcd compacted ahead of every revision written (two writes,
// then a compaction at the second: see controlplane.CompactAhead), and the
// link opened again. The API server's etcd watches, resuming, are answered
// "compacted"; every watch cache lists again and ends its watchers; each
// broker's watch, resumed from its resource version, is answered 410 Gone
// and relists. The cut lasts as long as the compaction, tens of
// milliseconds, plus the API server's reconnect, so the leader keeps its
// Lease and its informers live through it.
//
// Healed when a watch of each of the load's resources from its resource
// version of just before the cut is answered 410 Gone: their caches have
// listed again, and every broker's watch from before must relist.
func (r *run) compactAhead(ctx context.Context) (int64, error) {
	before := map[string]string{}
	for _, res := range []string{Widgets, ConfigMaps} {
		list, err := r.dyn.Resource(gvrOf(res)).Namespace(loadNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil {
			return 0, fmt.Errorf("reading the resource version of %s: %w", res, err)
		}
		before[res] = list.GetResourceVersion()
	}
	heal, err := r.links.cut(etcdLink)
	if err != nil {
		return 0, err
	}
	rev, err := r.cp.CompactAhead(ctx)
	if healErr := heal(); healErr != nil {
		return 0, errors.Join(err, healErr)
	}
	if err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for _, res := range []string{Widgets, ConfigMaps} {
		if err := controlplane.AwaitWatchExpired(ctx, before[res], r.dyn.Resource(gvrOf(res)).Namespace(loadNamespace).Watch); err != nil {
			return rev, fmt.Errorf("compacted at revision %d, but the %s watch cache did not list again: %w", rev, res, err)
		}
	}
	return rev, nil
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
