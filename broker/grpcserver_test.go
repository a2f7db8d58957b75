package broker

import (
	"net"
	"testing"
	"time"
)

// TestConnectionsPastTheCapWaitForOneToClose: the gRPC listener accepts
// at most GRPCLimits.MaxConnections at once; the next is accepted once one
// of them closes.
func TestConnectionsPastTheCapWaitForOneToClose(t *testing.T) {
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := GRPCLimits{MaxConnections: 1}.limitConnections(raw)
	defer lis.Close()
	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	for range 2 {
		c, err := net.Dial("tcp", raw.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	first := <-accepted
	select {
	case <-accepted:
		t.Fatal("a second connection was accepted past the cap of 1")
	case <-time.After(200 * time.Millisecond):
	}
	first.Close()
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("the second connection was not accepted once the first closed")
	}
}
