package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/binding"
)

// Defaults of Options.
const (
	DefaultListen      = ":8443"
	DefaultLocal       = "127.0.0.1:8444"
	DefaultDialTimeout = time.Second
	DefaultDrain       = 5 * time.Second
	DefaultQuiet       = 2 * time.Second
	DefaultCertRetry   = 5 * time.Second
	DefaultCertRefresh = 30 * time.Second
	// DefaultMaxBodyBytes bounds a request the relay reads in HTTPS mode:
	// the broker's own bound on a review.
	DefaultMaxBodyBytes = admission.DefaultMaxBodyBytes
)

// shutdownGrace is how long a stopping relay waits for the requests under
// way in HTTPS mode: the longest webhook timeout, and a resend's margin.
const shutdownGrace = binding.MaxAdmissionTimeout + 10*time.Second

// Options configure a Relay; the zero value relays :8443 to
// 127.0.0.1:8444 with no peers, byte for byte.
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
	// Certs is the admission serving certificate every replica serves;
	// nil: none, connections are relayed byte for byte. Once it is had,
	// new connections are served as HTTPS by the relay and each request is
	// sent to the local broker, or to a peer while none answers it. It is
	// read at Start, again every CertRetry (default DefaultCertRetry) until
	// it is had, then every CertRefresh (default DefaultCertRefresh).
	Certs                  CertSource
	CertRetry, CertRefresh time.Duration
	// ServerName is the name the brokers' certificate is verified for;
	// default the certificate's first DNS name.
	ServerName string
	// MaxBodyBytes bounds a request's body in HTTPS mode; larger ones are
	// answered 413 (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	Log          hclog.Logger
	Clock        clock.WithTicker
}

// Relay forwards connections to the local broker, or to a peer while the
// local broker refuses.
type Relay struct {
	opts  Options
	log   hclog.Logger
	clock clock.WithTicker
	lis   net.Listener

	tls        atomic.Pointer[tlsState] // nil: byte for byte
	transports []*http.Transport        // every tlsState's, closed at the end; under mu

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
	if opts.CertRetry <= 0 {
		opts.CertRetry = DefaultCertRetry
	}
	if opts.CertRefresh <= 0 {
		opts.CertRefresh = DefaultCertRefresh
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
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
// few seconds: the relay keeps accepting for Drain, sending to a peer
// once the local broker refuses. Waiting instead until killed at the end
// of the grace period (120 s, which an uninstall needs) would make every
// rollout that long. After Drain it stops accepting; in HTTPS mode it
// lets the requests under way finish (for up to shutdownGrace) and closes
// its connections once idle; of those relayed byte for byte, it leaves
// the ones to the local broker for the broker to end (its shutdown ends
// them once their reviews are answered), closes each one to a peer once
// it carried nothing for Quiet (the peer, not stopping, would keep an
// idle one open for minutes), and returns once none is left.
func (r *Relay) Start(ctx context.Context) error {
	if err := r.Listen(); err != nil {
		return err
	}
	r.log.Info("relaying admission connections", "address", r.lis.Addr().String(), "local", r.opts.Local)
	certsCtx, stopCerts := context.WithCancel(context.Background())
	certsDone := make(chan struct{})
	go func() {
		defer close(certsDone)
		if r.opts.Certs != nil {
			r.watchCerts(certsCtx)
		}
	}()
	srv, httpLis := r.newHTTPServer(), newConnListener(r.lis.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.ServeTLS(httpLis, "", "") }()
	accepted := make(chan error, 1)
	go func() { accepted <- r.accept(httpLis) }()
	err := r.wait(ctx, accepted)
	stopCerts()
	<-certsDone
	r.stopHTTP(srv, served)
	r.closeWhenQuiet()
	r.wg.Wait()
	r.mu.Lock()
	for _, t := range r.transports {
		t.CloseIdleConnections()
	}
	r.mu.Unlock()
	r.log.Info("relay stopped")
	return err
}

// wait returns accept's error once ctx has ended and Drain passed, or
// accept ended, with the listener closed.
func (r *Relay) wait(ctx context.Context, accepted <-chan error) error {
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
	return err
}

// stopHTTP ends HTTPS mode: the requests under way are answered, for up
// to shutdownGrace, then the connections are closed.
func (r *Relay) stopHTTP(srv *http.Server, served <-chan error) {
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		r.log.Warn("requests were still under way at the end of the grace: closing their connections", "grace", shutdownGrace.String())
		_ = srv.Close()
	}
	if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		r.log.Warn("serving HTTPS ended", "error", err)
	}
}

// accept hands each connection to the HTTPS server while the relay has a
// certificate, else to a goroutine of its own that relays it byte for
// byte, until the listener is closed.
func (r *Relay) accept(httpLis *connListener) error {
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
		if r.tls.Load() != nil {
			httpLis.hand(conn)
			continue
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
	peers, err := r.peers(ctx)
	if err != nil {
		return nil, false, errors.Join(append(errs, err)...)
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

// peers looks the peers up, within DialTimeout; an error when there is
// none.
func (r *Relay) peers(ctx context.Context) ([]string, error) {
	if r.opts.Peers == nil {
		return nil, errors.New("no peers configured")
	}
	lctx, cancel := context.WithTimeout(ctx, r.opts.DialTimeout)
	defer cancel()
	peers, err := r.opts.Peers.Peers(lctx)
	if err != nil {
		return nil, err
	}
	if len(peers) == 0 {
		return nil, errors.New("no other replica")
	}
	return peers, nil
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
