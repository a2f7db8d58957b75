package sdk_test

import (
	"context"
	"net"
	"slices"
	"testing"

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
