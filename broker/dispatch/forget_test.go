package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestAReleasedHandlerIsNeitherRestoredNorKeptAfterForget: a handler whose
// Lease says it was released on request is not restored (its webhooks and
// holds would come back); Forget drops a restored absent handler, is
// nothing for one not known, and refuses one with an instance connected.
func TestAReleasedHandlerIsNeitherRestoredNorKeptAfterForget(t *testing.T) {
	ctx := context.Background()
	store := &presence.Store{Client: kubetest.Wrap(fake.NewClientset()), Namespace: "tether-system"}
	for _, h := range []string{"away", "connected", "released"} {
		if err := store.Put(ctx, presence.Record{Handler: h, Grace: time.Minute, AbsentSince: time.Now().Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.MarkReleased(ctx, "released", time.Now()); err != nil {
		t.Fatal(err)
	}
	m := New(Options{
		Informers: informer.New(informer.Options{}), Presence: store,
		Compile: func(context.Context, []*tetherv1.Binding) ([]*binding.Binding, error) { return nil, nil },
	})
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Start(sctx) }()
	defer func() {
		cancel()
		<-done
	}()
	deadline := time.After(10 * time.Second)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !m.Synced() {
		select {
		case <-deadline:
			t.Fatal("not synced within 10 s")
		case <-tick.C:
		}
	}
	known := func(h string) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.controllers[h] != nil
	}
	if known("released") || !known("away") || !known("connected") {
		t.Fatalf("restored away %v, connected %v, released %v; want the first two only", known("away"), known("connected"), known("released"))
	}
	m.mu.Lock()
	m.controllers["connected"].pool.add(&session.Instance{Handler: "connected", ID: "i0"})
	m.mu.Unlock()

	for _, c := range []struct {
		handler string
		err     error
		kept    bool
	}{
		{"away", nil, false},
		{"never-seen", nil, false},
		{"connected", ErrConnected, true},
	} {
		if err := m.Forget(c.handler); !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("Forget(%s) = %v, want %v", c.handler, err, c.err)
		}
		if known(c.handler) != c.kept {
			t.Errorf("after Forget(%s): known %v, want %v", c.handler, known(c.handler), c.kept)
		}
	}
}
