package testenv

import (
	"context"
	"sync"
	"testing"

	"github.com/tether-dev/tether/broker"
)

// StartBroker creates a broker with opts, binds its listeners (so that its
// Addr is known on return) and runs it in this process until stop is called
// or the test ends. stop ends the broker, waits for Start to return and
// reports its error with t.Errorf; calling it again does nothing.
func StartBroker(t testing.TB, opts broker.Options) (b *broker.Broker, stop func()) {
	t.Helper()
	b, err := broker.New(opts)
	if err != nil {
		t.Fatalf("creating the broker: %v", err)
	}
	if err := b.Listen(); err != nil {
		t.Fatalf("binding the broker: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("broker: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return b, stop
}
