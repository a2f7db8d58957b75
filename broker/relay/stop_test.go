package relay

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

// TestStopsWithoutLeaks: once its context ends, the relay closes its
// listener, closes its connections to peers once quiet, leaves those to
// the local broker for the broker to end, and leaves no goroutine.
func TestStopsWithoutLeaks(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	local := newServer(t, named("local"))
	peer := newServer(t, named("peer"))
	peers := &switchPeers{}
	peers.set(peer.addr())
	r := New(Options{Listen: "127.0.0.1:0", Local: local.addr(), Peers: peers, Drain: -1, Quiet: 50 * time.Millisecond,
		Log: hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: t.Output(), Level: hclog.Debug})})
	if err := r.Listen(); err != nil {
		t.Fatal(err)
	}
	addr := r.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	toLocal, got := greeting(t, addr)
	if got != "local" {
		t.Fatalf("answered by %q", got)
	}
	// The local broker goes; the next connection goes to the peer.
	local.lis.Close()
	toPeer, got := greeting(t, addr)
	if got != "peer" {
		t.Fatalf("answered by %q", got)
	}
	cancel()
	// The connection to the peer is closed once quiet.
	if _, err := toPeer.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("read on the connection to the peer: %v, want EOF", err)
	}
	// The one to the local broker stays until the broker ends it.
	select {
	case err := <-done:
		t.Fatalf("the relay returned (%v) while a connection to the local broker was open", err)
	default:
	}
	if _, err := toLocal.Write([]byte("x")); err != nil {
		t.Fatalf("the connection to the local broker is closed: %v", err)
	}
	local.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not return within 10s of its last connection's end")
	}
	if _, err := net.Dial("tcp", addr); err == nil {
		t.Fatal("the relay's address still accepts connections")
	}
	toLocal.Close()
	toPeer.Close()
	peer.Close()
	local.Close()
}

// TestDrains: for Drain after its context ends, the relay still accepts
// and forwards, to a peer once the local broker refuses, as on a Pod's
// deletion, when the broker closes its listener at once.
func TestDrains(t *testing.T) {
	local := newServer(t, named("local"))
	peer := newServer(t, named("peer"))
	r := New(Options{Listen: "127.0.0.1:0", Local: local.addr(), Peers: fakePeers{peer.addr()}, Drain: time.Hour,
		Log: hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: t.Output(), Level: hclog.Debug})})
	if err := r.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	cancel()
	local.Close()
	for range 3 {
		if _, got := greeting(t, r.Addr().String()); got != "peer" {
			t.Fatalf("answered by %q while draining, want the peer", got)
		}
	}
	select {
	case err := <-done:
		t.Fatalf("the relay returned (%v) before the drain's end", err)
	default:
	}
	r.lis.Close() // ends the drain early, as an accept error does
	peer.Close()  // and the links to the peer then end
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the relay did not return")
	}
}

// switchPeers are peers a test may change.
type switchPeers struct{ addrs fakePeers }

func (s *switchPeers) set(addrs ...string) { s.addrs = addrs }

func (s *switchPeers) Peers(ctx context.Context) ([]string, error) { return s.addrs.Peers(ctx) }
