package sdk

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// ResolveEvery is how often a handler connected to every broker replica
// looks up the replicas' addresses again (and at once whenever one of its
// sessions ends), so that a new replica gets a session within seconds.
const ResolveEvery = 5 * time.Second

// replicas answers a RoundRobin dialer's addresses without dialling: Run
// asks through the context, which RoundRobin looks at before dialling.
type replicasQuery struct{ addrs []string }

type replicasQueryKey struct{}

// roundRobinAddrs are the addresses of d when it is a RoundRobin dialer;
// nil otherwise. Another dialer is given a context already cancelled, so
// that it dials nothing.
func roundRobinAddrs(d Dialer, target string) []string {
	q := &replicasQuery{}
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), replicasQueryKey{}, q))
	cancel()
	if conn, err := d(ctx, target); err == nil {
		_ = conn.Close()
	}
	return q.addrs
}

// replicaSet keeps one session to each broker replica, for a handler with
// validate or mutate bindings whose broker address yields several: a
// RoundRobin dialer's addresses, or every A and AAAA record of a DNS name
// (a headless Service). Every replica then has an instance to send the
// reviews the API server brings it (CAPABILITY_EVERY_REPLICA); lifecycle
// deliveries, timers and daemons still come only from the leader's session.
type replicaSet struct {
	h    *Handler
	p    *plan
	addr string
	// resolve returns the replicas' addresses (HOST:PORT) now.
	resolve func(ctx context.Context) ([]string, error)
	// again is signalled when a session ends: look the replicas up now.
	again chan struct{}
}

// replicaSet returns the set that serves Run for addr when the handler
// answers reviews and addr yields several replicas; nil to keep one session
// as always (one address, a loopback name, a target with a scheme other
// than dns, a dialer other than RoundRobin).
func (h *Handler) replicaSet(ctx context.Context, addr string, p *plan) *replicaSet {
	if !slices.ContainsFunc(p.hello.GetBindings(), func(b *tetherv1.Binding) bool {
		k := b.GetKind()
		return k == tetherv1.BindingKind_BINDING_KIND_VALIDATE || k == tetherv1.BindingKind_BINDING_KIND_MUTATE
	}) {
		return nil
	}
	set := &replicaSet{h: h, p: p, addr: addr, again: make(chan struct{}, 1)}
	if d := h.cfg.dialer; d != nil {
		addrs := roundRobinAddrs(d, addr)
		if len(slices.Compact(slices.Sorted(slices.Values(addrs)))) < 2 {
			return nil
		}
		set.resolve = func(context.Context) ([]string, error) { return addrs, nil }
	} else {
		host, port, ok := dnsTarget(addr)
		if !ok {
			return nil
		}
		find := lookup
		if h.cfg.lookup != nil {
			find = h.cfg.lookup
		}
		set.resolve = func(ctx context.Context) ([]string, error) { return find(ctx, host, port) }
		if first, err := set.resolve(ctx); err != nil || len(first) < 2 {
			return nil
		}
	}
	p.hello.Capabilities = append(slices.Clone(p.hello.GetCapabilities()), tetherv1.Capability_CAPABILITY_EVERY_REPLICA)
	return set
}

// dnsTarget is the host and port of a gRPC target naming a host by DNS:
// HOST:PORT or dns:///HOST:PORT, not an IP address and not localhost.
func dnsTarget(target string) (host, port string, ok bool) {
	target = strings.TrimPrefix(target, "dns:///")
	if strings.Contains(target, "://") || strings.Contains(target, ":///") {
		return "", "", false
	}
	host, port, err := net.SplitHostPort(target)
	if err != nil || host == "" || net.ParseIP(host) != nil || host == "localhost" {
		return "", "", false
	}
	return host, port, true
}

// lookup is every address of host, with port.
func lookup(ctx context.Context, host, port string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, ConnectTimeout)
	defer cancel()
	ips, err := net.DefaultResolver.LookupHost(ctx, host)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(ips))
	for _, ip := range ips {
		if p := net.ParseIP(ip); p != nil && p.IsLoopback() {
			continue // one broker, whichever loopback address
		}
		out = append(out, net.JoinHostPort(ip, port))
	}
	if len(out) == 0 {
		return nil, errors.New("no address")
	}
	return slices.Compact(slices.Sorted(slices.Values(out))), nil
}

// run keeps a session to each replica until ctx ends, starting one for
// each address that appears and ending the session of each that goes. It
// returns the first rejection, having ended the other sessions.
func (r *replicaSet) run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var wg sync.WaitGroup
	defer wg.Wait()
	running := map[string]context.CancelFunc{}
	rejected := make(chan error, 1)
	t := time.NewTicker(ResolveEvery)
	defer t.Stop()
	for {
		if addrs, err := r.resolve(ctx); err != nil || len(addrs) == 0 {
			r.h.log.Warn("cannot look up the broker replicas; keeping the sessions there are", "broker", r.addr, "error", err)
		} else {
			r.follow(ctx, addrs, running, &wg, rejected)
		}
		select {
		case <-ctx.Done():
			return nil
		case err := <-rejected:
			cancel(err)
			return err
		case <-t.C:
		case <-r.again:
		}
	}
}

// follow starts a session loop for each new address and ends those of the
// addresses gone.
func (r *replicaSet) follow(ctx context.Context, addrs []string, running map[string]context.CancelFunc, wg *sync.WaitGroup, rejected chan<- error) {
	for a, stop := range running {
		if !slices.Contains(addrs, a) {
			r.h.log.Info("broker replica gone; ending its session", "broker", r.addr, "replica", a)
			stop()
			delete(running, a)
		}
	}
	for _, a := range addrs {
		if running[a] != nil {
			continue
		}
		sctx, stop := context.WithCancel(ctx)
		running[a] = stop
		pinned := &replicaAddr{addr: a, authority: authority(r.addr)}
		wg.Go(func() {
			err := r.h.connectLoop(sctx, r.addr, r.p, pinned, r.h.log.With("broker", r.addr, "replica", a), r.lookAgain)
			if err != nil {
				select {
				case rejected <- err:
				default:
				}
			}
		})
	}
}

// replicaAddr is one replica's address, which a session of a replicaSet
// dials: as a passthrough target, so that no session depends on the name
// resolving again (gRPC's resolver would look it up at every connection,
// waiting up to 30 s, and fail the session when it has no address at that
// moment, though the replica answers), and under the authority of the
// address Run was given, which TLS verifies.
type replicaAddr struct {
	addr      string // HOST:PORT
	authority string // "": gRPC's default, the address
}

// target is the gRPC target of a connection: the replica's address, or
// addr when r is nil.
func (r *replicaAddr) target(addr string) string {
	if r == nil {
		return addr
	}
	return "passthrough:///" + r.addr
}

func (r *replicaAddr) dialOptions() []grpc.DialOption {
	opts := []grpc.DialOption{grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", r.addr)
	})}
	if r.authority != "" {
		opts = append(opts, grpc.WithAuthority(r.authority))
	}
	return opts
}

// authority is the :authority gRPC gives a connection to target (its
// endpoint, for the schemes a replicaSet serves: none, dns and
// passthrough); "" for others.
func authority(target string) string {
	for _, scheme := range []string{"dns:///", "passthrough:///"} {
		if rest, ok := strings.CutPrefix(target, scheme); ok {
			return rest
		}
	}
	if strings.Contains(target, "://") {
		return ""
	}
	return target
}

func (r *replicaSet) lookAgain() {
	select {
	case r.again <- struct{}{}:
	default:
	}
}
