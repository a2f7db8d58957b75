package dispatch

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/presence"
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

// TestRestoreRetriesUntilTheLeasesCanBeRead: the API server failing the
// first lists of Leases does not leave the recorded handlers forgotten, and
// the broker is not synced (not ready) until they are restored.
func TestRestoreRetriesUntilTheLeasesCanBeRead(t *testing.T) {
	kube := fake.NewClientset()
	store := &presence.Store{Client: kubetest.Wrap(kube), Namespace: "tether-system"}
	if err := store.Put(context.Background(), presence.Record{Handler: "away", Grace: time.Minute,
		AbsentSince: time.Now().Add(-time.Hour)}); err != nil {
		t.Fatal(err)
	}
	var fails atomic.Int32
	fails.Store(3)
	kube.PrependReactor("list", "leases", func(clienttesting.Action) (bool, kruntime.Object, error) {
		if fails.Add(-1) >= 0 {
			return true, nil, apierrors.NewServiceUnavailable("etcd is down")
		}
		return false, nil, nil
	})
	m := New(Options{
		Informers: informer.New(informer.Options{}), Presence: store,
		Compile: func(context.Context, []*tetherv1.Binding) ([]*binding.Binding, error) { return nil, nil },
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
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
			t.Fatal("not synced 10 s after the API server answered again")
		case <-tick.C:
		}
	}
	if fails.Load() >= 0 {
		t.Fatalf("synced before the Leases could be read (%d failures left)", fails.Load()+1)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.controllers["away"] == nil {
		t.Error("the recorded handler was not restored")
	}
}
