package dispatch

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/kube/kubetest"
	"github.com/tether-dev/tether/broker/presence"
)

// TestRestoreTrustsOnlyWhatItSigned: a record the broker signed is
// restored as written, its identity not re-checked; one changed since it
// was signed is not restored, with a HandlerNotRestored Event; an unsigned
// one, soon after the key was made, is restored when its identity passes
// the re-check.
func TestRestoreTrustsOnlyWhatItSigned(t *testing.T) {
	kube := fake.NewClientset()
	key := &presence.Key{Secret: []byte("0123456789abcdef0123456789abcdef"), Created: time.Now()}
	signing := &presence.Store{Client: kubetest.Wrap(kube), Namespace: "tether-system", Key: key}
	unsigned := &presence.Store{Client: kubetest.Wrap(kube), Namespace: "tether-system"}
	ctx := context.Background()
	for h, s := range map[string]*presence.Store{"signed": signing, "changed": signing, "unsigned": unsigned} {
		r := presence.Record{Handler: h, Grace: time.Minute, AbsentSince: time.Now().Add(-time.Second),
			User: presence.User{Name: "system:serviceaccount:apps:" + h}}
		if err := s.Put(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	leases := kube.CoordinationV1().Leases("tether-system")
	l, err := leases.Get(ctx, presence.LeaseName("changed"), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	l.Annotations["tether.dev/user"] = `{"name":"system:serviceaccount:kube-system:admin"}`
	if _, err := leases.Update(ctx, l, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var rechecked []string
	reauthorize := func(_ context.Context, handler string, user presence.User, _ []*binding.Binding) error {
		mu.Lock()
		defer mu.Unlock()
		rechecked = append(rechecked, handler)
		if handler == "unsigned" {
			return nil
		}
		return fmt.Errorf("handler: %w: %s may not connect", auth.ErrDenied, user.Name)
	}
	rec := &recorded{}
	m := startRestoring(t, ctx, signing, rec, reauthorize)
	waitSynced(t, m)

	m.mu.Lock()
	defer m.mu.Unlock()
	rec.mu.Lock()
	defer rec.mu.Unlock()
	mu.Lock()
	defer mu.Unlock()
	if !slices.Equal(rechecked, []string{"unsigned"}) {
		t.Errorf("re-checked %q, want only the unsigned record", rechecked)
	}
	for h, want := range map[string]bool{"signed": true, "unsigned": true, "changed": false} {
		if got := m.controllers[h] != nil; got != want {
			t.Errorf("%s: restored %v, want %v", h, got, want)
		}
		if event := slices.Contains(rec.events, reasonNotRestored+" "+presence.LeaseName(h)); event == want {
			t.Errorf("%s: %s Event posted %v, want %v", h, reasonNotRestored, event, !want)
		}
	}
}
