package chaos

import (
	"context"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// front stands where a Service would, in front of the brokers' admission
// ports: the API server calls the webhooks at its one address, and each
// connection goes to the broker that leads, as a Service routes to the one
// Ready pod (only the leader passes the readiness probe). A connection that
// arrives while none leads is closed, and the webhook's failure policy
// decides. It is plumbing, not a fault: the faults stay toxiproxy's.
type front struct {
	listener net.Listener
	// upstream returns the leading broker's admission address, or an error.
	upstream func(context.Context) (string, error)

	wg sync.WaitGroup
}

// leaderRefresh is how long a front trusts the leader it looked up: about
// a readiness probe's period.
const leaderRefresh = 250 * time.Millisecond

// newFront listens on a free loopback port for the addresses upstream
// names; start serves it.
func newFront(upstream func(context.Context) (string, error)) (*front, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("listening for the admission front: %w", err)
	}
	return &front{listener: l, upstream: cached(upstream, leaderRefresh)}, nil
}

func (f *front) addr() string { return f.listener.Addr().String() }

// start forwards connections until ctx ends, then closes the listener and
// waits for the connections under way.
func (f *front) start(ctx context.Context) {
	f.wg.Go(func() {
		<-ctx.Done()
		_ = f.listener.Close()
	})
	for {
		conn, err := f.listener.Accept()
		if err != nil {
			break
		}
		f.wg.Go(func() { f.forward(ctx, conn) })
	}
	f.wg.Wait()
}

func (f *front) forward(ctx context.Context, in net.Conn) {
	defer in.Close()
	addr, err := f.upstream(ctx)
	if err != nil {
		return
	}
	var d net.Dialer
	out, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return
	}
	defer out.Close()
	stop := context.AfterFunc(ctx, func() { in.Close(); out.Close() })
	defer stop()
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(out, in)
		close(done)
	}()
	_, _ = io.Copy(in, out)
	in.Close()
	<-done
}

// cached calls get at most once per ttl, sharing its answer meanwhile.
func cached(get func(context.Context) (string, error), ttl time.Duration) func(context.Context) (string, error) {
	var mu sync.Mutex
	var at time.Time
	var addr string
	var err error
	return func(ctx context.Context) (string, error) {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) > ttl {
			addr, err = get(ctx)
			at = time.Now()
		}
		return addr, err
	}
}
