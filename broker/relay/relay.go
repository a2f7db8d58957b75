package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/utils/clock"
)

// Defaults of Options.
const (
	DefaultListen      = ":8443"
	DefaultLocal       = "127.0.0.1:8444"
	DefaultDialTimeout = time.Second
	DefaultDrain       = 5 * time.Second
	DefaultQuiet       = 2 * time.Second
)

// Options configure a Relay; the zero value relays :8443 to
// 127.0.0.1:8444 with no peers.
type Options struct {
	// Listen is the address the relay accepts connections on (default
	// DefaultListen); Listener, when set, is used instead.
	Listen   string
	Listener net.Listener
	// Local is the local broker's admission listener (default DefaultLocal).
	Local string
	// Peers are the other replicas' admission listeners, tried in a random
	// order when Local refuses; nil: none, the connection is closed.
	Peers Peers
	// DialTimeout bounds each dial and the peers' lookup (default
	// DefaultDialTimeout): a refusal is immediate, and a replica that takes
	// longer is likely gone, so the next is tried while the API server
	// still waits.
	DialTimeout time.Duration
	// Drain is how long the relay keeps accepting once Start's context
	// ends (default DefaultDrain; negative: not at all). See Start.
	Drain time.Duration
	// Quiet is how long a connection to a peer must have carried no byte
	// before the stopping relay closes it (default DefaultQuiet).
	Quiet time.Duration
	Log   hclog.Logger
	Clock clock.WithTicker
}

// Relay forwards connections to the local broker, or to a peer while the
// local broker refuses.
type Relay struct {
	opts  Options
	log   hclog.Logger
	clock clock.WithTicker
	lis   net.Listener

	mu       sync.Mutex
	links    map[*link]struct{}
	stopping bool // no link is tracked any more: close it at once
	wg       sync.WaitGroup
}

// New returns a Relay; Start (or Listen) binds its listener.
func New(opts Options) *Relay {
	if opts.Listen == "" {
		opts.Listen = DefaultListen
	}
	if opts.Local == "" {
		opts.Local = DefaultLocal
	}
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = DefaultDialTimeout
	}
	if opts.Drain == 0 {
		opts.Drain = DefaultDrain
	}
	if opts.Quiet <= 0 {
		opts.Quiet = DefaultQuiet
	}
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Relay{opts: opts, log: opts.Log, clock: opts.Clock, lis: opts.Listener, links: map[*link]struct{}{}}
}

// Listen binds the listener, if Start has not yet.
func (r *Relay) Listen() error {
	if r.lis != nil {
		return nil
	}
	lis, err := net.Listen("tcp", r.opts.Listen)
	if err != nil {
		return fmt.Errorf("relay: listening on %s: %w", r.opts.Listen, err)
	}
	r.lis = lis
	return nil
}

// Addr is the listener's address once bound, else nil.
func (r *Relay) Addr() net.Addr {
	if r.lis == nil {
		return nil
	}
	return r.lis.Addr()
}

// Start relays until ctx ends, and then stops as a Pod's deletion needs.
// The kubelet sends SIGTERM to the relay and the broker at once, and the
// broker closes its admission listener at once, while the Pod's address
// may still be in the endpoints the API server and kube-proxy use for a
// few seconds: the relay keeps accepting for Drain, forwarding to a peer
// once the local broker refuses. Waiting instead until killed at the end
// of the grace period (120 s, which an uninstall needs) would make every
// rollout that long. After Drain it stops accepting, leaves the
// connections to the local broker for the broker to end (its shutdown
// ends them once their reviews are answered), closes each connection to a
// peer once it carried nothing for Quiet (the peer, not stopping, would
// keep an idle one open for minutes), and returns once none is left.
func (r *Relay) Start(ctx context.Context) error {
	if err := r.Listen(); err != nil {
		return err
	}
	r.log.Info("relaying admission connections", "address", r.lis.Addr().String(), "local", r.opts.Local)
	accepted := make(chan error, 1)
	go func() { accepted <- r.accept() }()
	var err error
	done := false // accept has returned
	select {
	case err = <-accepted:
		done = true
	case <-ctx.Done():
		if r.opts.Drain > 0 {
			r.log.Info("stopping: accepting connections a while longer", "drain", r.opts.Drain.String())
			select {
			case err = <-accepted:
				done = true
			case <-r.clock.After(r.opts.Drain):
			}
		}
	}
	r.lis.Close()
	if !done {
		err = <-accepted
	}
	r.closeWhenQuiet()
	r.wg.Wait()
	r.log.Info("relay stopped")
	return err
}

// accept hands each connection to a goroutine of its own until the
// listener is closed.
func (r *Relay) accept() error {
	for {
		conn, err := r.lis.Accept()
		if errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			return fmt.Errorf("relay: accepting: %w", err)
		}
		r.wg.Add(1)
		go r.handle(conn)
	}
}

// handle forwards one connection, or closes it when no broker accepts it:
// the API server then fails the call, as it would have without the relay.
func (r *Relay) handle(conn net.Conn) {
	defer r.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	up, local, err := r.dial(ctx)
	cancel()
	if err != nil {
		r.log.Warn("no broker accepted a connection; closing it", "from", conn.RemoteAddr().String(), "error", err)
		conn.Close()
		return
	}
	l := newLink(conn, up, local, r.clock)
	if !r.track(l) {
		l.close()
		return
	}
	l.run()
	r.mu.Lock()
	delete(r.links, l)
	r.mu.Unlock()
}

// track records l, unless the relay has stopped tracking.
func (r *Relay) track(l *link) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopping {
		return false
	}
	r.links[l] = struct{}{}
	return true
}

// dial connects to the local broker, else to the first peer that accepts.
func (r *Relay) dial(ctx context.Context) (net.Conn, bool, error) {
	conn, err := r.dialOne(ctx, r.opts.Local)
	if err == nil {
		return conn, true, nil
	}
	errs := []error{fmt.Errorf("the local broker %s: %w", r.opts.Local, err)}
	if r.opts.Peers == nil {
		return nil, false, errs[0]
	}
	lctx, cancel := context.WithTimeout(ctx, r.opts.DialTimeout)
	peers, err := r.opts.Peers.Peers(lctx)
	cancel()
	if err != nil {
		return nil, false, errors.Join(append(errs, err)...)
	}
	if len(peers) == 0 {
		return nil, false, errors.Join(append(errs, errors.New("no other replica"))...)
	}
	// In a random order, so that with more than two replicas the load of a
	// dead one spreads.
	for _, i := range rand.Perm(len(peers)) {
		conn, err := r.dialOne(ctx, peers[i])
		if err == nil {
			r.log.Info("the local broker refused a connection; forwarded it to another replica", "replica", peers[i], "local_error", errs[0].Error())
			return conn, false, nil
		}
		errs = append(errs, fmt.Errorf("replica %s: %w", peers[i], err))
	}
	return nil, false, errors.Join(errs...)
}

func (r *Relay) dialOne(ctx context.Context, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: r.opts.DialTimeout}
	return d.DialContext(ctx, "tcp", addr)
}

// closeWhenQuiet stops tracking, closes each link to a peer once it has
// been quiet for Quiet and each link to the local broker once the broker
// ended its side, and returns when no link is left.
func (r *Relay) closeWhenQuiet() {
	tick := r.clock.NewTicker(r.opts.Quiet / 4)
	defer tick.Stop()
	r.mu.Lock()
	r.stopping = true
	r.mu.Unlock()
	for {
		left := 0
		r.mu.Lock()
		for l := range r.links {
			if l.upstreamEnded() || !l.local && r.clock.Since(l.lastActive()) >= r.opts.Quiet {
				l.close()
				continue
			}
			left++
		}
		r.mu.Unlock()
		if left == 0 {
			return
		}
		<-tick.C()
	}
}
