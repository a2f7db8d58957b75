package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/presence"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// recorded keeps the Events posted, as "reason name".
type recorded struct {
	mu     sync.Mutex
	events []string
}

func (r *recorded) Event(obj *unstructured.Unstructured, warning bool, reason, _ string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if warning {
		r.events = append(r.events, reason+" "+obj.GetName())
	}
}

// TestRestoreReauthorizesTheRecordedIdentity: before a handler is restored
// from its Lease, the identity the Lease records is re-checked. One allowed
// is restored (and a not-restored mark left by an earlier broker cleared);
// one denied the handler's name or a binding's right is not restored at
// all, whatever sweep it records, with a HandlerNotRestored Warning Event
// on its Lease and the reason marked there; the API server not answering
// the review is retried, and the broker is not synced until it answers.
func TestRestoreReauthorizesTheRecordedIdentity(t *testing.T) {
	kube := fake.NewClientset()
	store := &presence.Store{Client: kubetest.Wrap(kube), Namespace: "tether-system"}
	ctx := context.Background()
	sweep := []presence.Scope{{Resource: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}}}
	for _, h := range []string{"allowed", "denied-name", "denied-binding", "transient"} {
		r := presence.Record{Handler: h, Grace: time.Minute, AbsentSince: time.Now().Add(-time.Second),
			User: presence.User{Name: "system:serviceaccount:apps:" + h}, Sweep: sweep}
		if h == "allowed" || h == "transient" {
			r.Sweep = nil // a restored handler would sweep it, with no client here
		}
		if err := store.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := store.MarkNotRestored(ctx, "allowed", "denied by an earlier broker"); err != nil {
		t.Fatal(err)
	}
	var unanswered atomic.Int32
	unanswered.Store(3)
	reauthorize := func(_ context.Context, handler string, user presence.User, _ []*binding.Binding) error {
		if user.Name != "system:serviceaccount:apps:"+handler {
			return fmt.Errorf("asked for %q, not the recorded user", user.Name)
		}
		switch handler {
		case "denied-name":
			return fmt.Errorf("handler: %w: %s may not connect handlers.tether.dev %s", auth.ErrDenied, user.Name, handler)
		case "denied-binding":
			return &binding.FieldError{Index: 0, ID: "hold", Field: "resource", Err: fmt.Errorf("%w: may not patch configmaps", auth.ErrDenied)}
		case "transient":
			if unanswered.Add(-1) >= 0 {
				return fmt.Errorf("checking permissions: %w", apierrors.NewServiceUnavailable("etcd is down"))
			}
		}
		return nil
	}
	rec := &recorded{}
	m := startRestoring(t, ctx, store, rec, reauthorize)
	waitSynced(t, m)
	if unanswered.Load() >= 0 {
		t.Errorf("synced before the review of %q was answered", "transient")
	}

	marks := map[string]string{}
	records, err := store.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range records {
		marks[r.Handler] = r.Marks.NotRestored
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for h, want := range map[string]bool{"allowed": true, "transient": true, "denied-name": false, "denied-binding": false} {
		if got := m.controllers[h] != nil; got != want {
			t.Errorf("%s: restored %v, want %v", h, got, want)
		}
		event := slices.Contains(rec.events, reasonNotRestored+" "+presence.LeaseName(h))
		if event == want {
			t.Errorf("%s: %s Event posted %v, want %v (events %q)", h, reasonNotRestored, event, !want, rec.events)
		}
		if (marks[h] == "") != want {
			t.Errorf("%s: not-restored mark %q, want one only when not restored", h, marks[h])
		}
	}
}

func waitSynced(t *testing.T, m *Manager) {
	t.Helper()
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
}

// startRestoring starts a Manager that restores what store records,
// re-checking identities with reauthorize and posting Events to rec; it is
// stopped when the test ends.
func startRestoring(t *testing.T, ctx context.Context, store *presence.Store, rec *recorded,
	reauthorize func(context.Context, string, presence.User, []*binding.Binding) error) *Manager {
	t.Helper()
	m := New(Options{
		Informers: informer.New(informer.Options{}), Presence: store, Recorder: rec, Reauthorize: reauthorize,
		Compile: func(context.Context, []*tetherv1.Binding) ([]*binding.Binding, error) { return nil, nil },
	})
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- m.Start(runCtx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return m
}
