package testenv

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Balancer listens on a loopback port and spreads the connections it
// accepts over its backends in turn, skipping one that refuses: a Service
// that selects every ready replica. It drops a dead replica at once, where
// a Service's endpoints keep it until the kubelet notices its container
// exited (docs/admission.md, "In the cluster").
type Balancer struct {
	lis      net.Listener
	backends []string
	next     atomic.Uint32
	wg       sync.WaitGroup
	conns    sync.Map // net.Conn -> true, to close on Close
}

// StartBalancer listens and serves until Close.
func StartBalancer(backends ...string) (*Balancer, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	b := &Balancer{lis: lis, backends: backends}
	b.wg.Go(func() {
		for {
			in, err := lis.Accept()
			if err != nil {
				return
			}
			start := int(b.next.Add(1))
			b.wg.Go(func() { b.serve(in, start) })
		}
	})
	return b, nil
}

// Addr is the address the balancer listens on.
func (b *Balancer) Addr() string { return b.lis.Addr().String() }

// Close stops listening, closes every connection and waits for them.
func (b *Balancer) Close() {
	_ = b.lis.Close()
	b.conns.Range(func(c, _ any) bool { _ = c.(net.Conn).Close(); return true })
	b.wg.Wait()
}

// serve pipes in to the first backend, from start on, that accepts.
func (b *Balancer) serve(in net.Conn, start int) {
	defer in.Close()
	var out net.Conn
	for i := range b.backends {
		var err error
		if out, err = net.DialTimeout("tcp", b.backends[(start+i)%len(b.backends)], time.Second); err == nil {
			break
		}
	}
	if out == nil {
		return
	}
	defer out.Close()
	b.conns.Store(in, true)
	b.conns.Store(out, true)
	defer b.conns.Delete(in)
	defer b.conns.Delete(out)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src) // ends with either side: close both
		_ = dst.Close()
		done <- struct{}{}
	}
	go pipe(out, in)
	go pipe(in, out)
	<-done
	<-done
}
