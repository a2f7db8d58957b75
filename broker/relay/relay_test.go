package relay

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakePeers are a fixed list of peer addresses.
type fakePeers []string

func (p fakePeers) Peers(context.Context) ([]string, error) { return p, nil }

// server is a real TCP listener on localhost that runs handle on each
// connection; its connections are closed when the test ends or by Close.
type server struct {
	lis   net.Listener
	mu    sync.Mutex
	conns []net.Conn
	wg    sync.WaitGroup
}

func newServer(t *testing.T, handle func(net.Conn)) *server {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &server{lis: lis}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s.mu.Lock()
			s.conns = append(s.conns, c)
			s.mu.Unlock()
			s.wg.Add(1)
			go func() { defer s.wg.Done(); handle(c) }()
		}
	}()
	t.Cleanup(s.Close)
	return s
}

func (s *server) addr() string { return s.lis.Addr().String() }

// Close stops the listener and closes every connection, as a process
// that exits does.
func (s *server) Close() {
	s.lis.Close()
	s.mu.Lock()
	for _, c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// named answers every connection with its name, then echoes what it reads
// until the client ends its side, then closes.
func named(name string) func(net.Conn) {
	return func(c net.Conn) {
		defer c.Close()
		if _, err := io.WriteString(c, name+"\n"); err != nil {
			return
		}
		_, _ = io.Copy(c, c)
	}
}

// refusing is an address on localhost where nothing listens.
func refusing(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// startRelay starts a relay on localhost with opts; it is stopped when the
// test ends, and the returned stop stops it and returns Start's error.
func startRelay(t *testing.T, opts Options) (addr string, stop func() error) {
	t.Helper()
	r, stop := runRelay(t, opts)
	return r.Addr().String(), stop
}

// runRelay is startRelay, returning the Relay.
func runRelay(t *testing.T, opts Options) (*Relay, func() error) {
	t.Helper()
	opts.Listen = "127.0.0.1:0"
	if opts.Log == nil {
		opts.Log = hclog.New(&hclog.LoggerOptions{Name: t.Name(), Output: t.Output(), Level: hclog.Debug})
	}
	if opts.Drain == 0 {
		opts.Drain = -1
	}
	r := New(opts)
	if err := r.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Start(ctx) }()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the relay did not stop within 10s")
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return r, stop
}

// greeting dials addr and reads the first line the broker behind it sends.
func greeting(t *testing.T, addr string) (net.Conn, string) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(10 * time.Second))
	line := make([]byte, 0, 16)
	b := make([]byte, 1)
	for {
		if _, err := c.Read(b); err != nil {
			return c, string(line) + "<" + err.Error() + ">"
		}
		if b[0] == '\n' {
			return c, string(line)
		}
		line = append(line, b[0])
	}
}

func TestForwardsToTheLocalBroker(t *testing.T) {
	local := newServer(t, named("local"))
	peer := newServer(t, named("peer"))
	addr, _ := startRelay(t, Options{Local: local.addr(), Peers: fakePeers{peer.addr()}})
	if _, got := greeting(t, addr); got != "local" {
		t.Fatalf("answered by %q, want the local broker", got)
	}
}

func TestForwardsToAPeerWhileTheLocalBrokerRefuses(t *testing.T) {
	peer := newServer(t, named("peer"))
	// The first peer refuses too: the next is tried.
	addr, _ := startRelay(t, Options{Local: refusing(t), Peers: fakePeers{refusing(t), peer.addr()}})
	for range 5 { // in a random order each time
		if _, got := greeting(t, addr); got != "peer" {
			t.Fatalf("answered by %q, want the peer", got)
		}
	}
}

func TestClosesTheConnectionWhenNoBrokerAccepts(t *testing.T) {
	for name, peers := range map[string]Peers{"no peers": nil, "every peer refuses": fakePeers{refusing(t), refusing(t)}, "none listed": fakePeers{}} {
		t.Run(name, func(t *testing.T) {
			addr, _ := startRelay(t, Options{Local: refusing(t), Peers: peers})
			if _, got := greeting(t, addr); got != "<EOF>" {
				t.Fatalf("read %q, want the connection closed (EOF)", got)
			}
		})
	}
}

func TestCopiesBothWays(t *testing.T) {
	local := newServer(t, named("local"))
	addr, _ := startRelay(t, Options{Local: local.addr()})
	c, _ := greeting(t, addr)
	sent := make([]byte, 4<<20)
	rand.Read(sent)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(sent); errc <- err }()
	got := make([]byte, len(sent))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, sent) {
		t.Fatal("the bytes echoed through the relay differ from those sent")
	}
}

// TestHalfClose: a client that ends its side after its request still
// gets the whole answer, and a broker's end reaches the client.
func TestHalfClose(t *testing.T) {
	answer := bytes.Repeat([]byte("answer "), 10000)
	local := newServer(t, func(c net.Conn) {
		defer c.Close()
		req, err := io.ReadAll(c) // to the client's end
		if err != nil || string(req) != "request" {
			return
		}
		_, _ = c.Write(answer)
	})
	addr, _ := startRelay(t, Options{Local: local.addr()})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, "request"); err != nil {
		t.Fatal(err)
	}
	if err := c.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c) // to the broker's end
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, answer) {
		t.Fatalf("read %d bytes, want the %d of the answer", len(got), len(answer))
	}
}

// TestTheBrokersDeathEndsTheConnection: a broker that exits ends the
// connections relayed to it (the review in flight is lost, as it would
// be without the relay), and the next connection goes to a peer.
func TestTheBrokersDeathEndsTheConnection(t *testing.T) {
	local := newServer(t, named("local"))
	peer := newServer(t, named("peer"))
	addr, _ := startRelay(t, Options{Local: local.addr(), Peers: fakePeers{peer.addr()}})
	c, got := greeting(t, addr)
	if got != "local" {
		t.Fatalf("answered by %q, want the local broker", got)
	}
	local.Close()
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("read after the broker's exit: %v, want EOF", err)
	}
	if _, got := greeting(t, addr); got != "peer" {
		t.Fatalf("answered by %q after the broker's exit, want the peer", got)
	}
}
