package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestAttachWhileInformersStartIsRetried: a handler that connects while a
// new leader's informers are not yet running is told to retry
// (session.ErrTryLater, Unavailable on the wire), not refused for good.
func TestAttachWhileInformersStartIsRetried(t *testing.T) {
	m := New(Options{Informers: informer.New(informer.Options{})}) // never started
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	defer func() {
		cancel()
		<-done
	}()
	var res resource.Resource
	res.GroupVersionResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	bindings := []*binding.Binding{{ID: "create-0", Kind: binding.Create, Resource: res}}
	in := &session.Instance{Handler: "early", ID: "i0"}

	deadline := time.After(5 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		_, err := m.Attach(ctx, in, &tetherv1.Hello{Handler: "early"}, bindings)
		if !errors.Is(err, session.ErrNotLeading) { // the Manager itself has started
			if !errors.Is(err, session.ErrTryLater) {
				t.Fatalf("Attach = %v, want an error wrapping session.ErrTryLater", err)
			}
			return
		}
		select {
		case <-deadline:
			t.Fatal("the Manager did not start")
		case <-tick.C:
		}
	}
}
