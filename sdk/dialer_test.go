package sdk_test

import (
	"context"
	"net"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tether-dev/tether/sdk"
)

// TestRoundRobinDialsTheBrokersInTurn: each connection goes to the next
// replica, whatever address Run was given, and no replica is a clear error.
func TestRoundRobinDialsTheBrokersInTurn(t *testing.T) {
	var addrs []string
	accepted := make(chan int, 8)
	for i := range 2 {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lis.Close() })
		addrs = append(addrs, lis.Addr().String())
		go func() {
			for {
				c, err := lis.Accept()
				if err != nil {
					return
				}
				c.Close()
				accepted <- i
			}
		}()
	}
	dial := sdk.RoundRobin(addrs...)
	var got []int
	for range 4 {
		c, err := dial(context.Background(), "ignored:1")
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		got = append(got, <-accepted)
	}
	if want := []int{0, 1, 0, 1}; !slices.Equal(got, want) {
		t.Errorf("replicas dialled %v, want %v", got, want)
	}
	if _, err := sdk.RoundRobin()(context.Background(), "x:1"); err == nil {
		t.Error("RoundRobin without addresses dialled something")
	}
}

// TestSilentBrokerIsGivenUpSoon: a connection that opens but never answers
// (a Service that sent the dial to a replica that is gone) is given up
// within sdk.ConnectTimeout, and the next dial reaches a broker. gRPC's
// own 20s made a handler wait that long after every failover.
func TestSilentBrokerIsGivenUpSoon(t *testing.T) {
	hs := newHarness(t, nil)
	var dials atomic.Int32
	silent := func(ctx context.Context, addr string) (net.Conn, error) {
		if dials.Add(1) == 1 {
			client, server := net.Pipe()
			t.Cleanup(func() { server.Close() })
			return client, nil // the other end never speaks
		}
		return hs.dial(ctx, addr)
	}
	h := sdk.New("silent", hs.options(sdk.WithDialer(silent))...)
	h.OnCreate(configMaps, noop)
	begin := time.Now()
	hs.run(h)
	hs.session()
	if took := time.Since(begin); took < sdk.ConnectTimeout {
		t.Errorf("connected after %s, before the silent connection could have been given up (%s)", took, sdk.ConnectTimeout)
	}
	if n := dials.Load(); n < 2 {
		t.Errorf("%d dials, want the silent one and another", n)
	}
}
