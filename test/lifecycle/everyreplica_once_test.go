package lifecycle

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestAHandlerOnEveryReplicaGetsEachChangeOnce: a handler with a review
// binding keeps a session to both broker replicas (the follower's for
// reviews only), and its create and update bindings still get each change
// once: lifecycle deliveries come from the leader's session alone.
func TestAHandlerOnEveryReplicaGetsEachChangeOnce(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	rs := startReplicas(t, cp)

	var mu sync.Mutex
	got := map[string]int{} // "create name" or "update name size"
	record := func(key string) {
		mu.Lock()
		defer mu.Unlock()
		got[key]++
	}
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return got[key]
	}
	h := sdk.New("everyonce", append(handlerOpts(t), sdk.WithDialer(sdk.RoundRobin(rs.Addrs...)))...)
	h.OnValidate(widgets, func(context.Context, *sdk.Review) error { return nil }, sdk.Namespaces(ns))
	h.OnCreate(widgets, func(_ context.Context, ev *sdk.Event) error {
		record("create " + ev.Name)
		return nil
	}, sdk.Namespaces(ns))
	h.OnUpdate(widgets, func(_ context.Context, ev *sdk.Event) error {
		size, _, _ := unstructured.NestedInt64(ev.Object().Object, "spec", "size")
		record(fmt.Sprintf("update %s %d", ev.Name, size))
		return nil
	}, sdk.Namespaces(ns))
	runHandler(t, h, rs.Addrs[0])
	eventually(t, "the handler's webhook to point at every replica", func() bool {
		c, err := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(),
			"tether-everyonce", metav1.GetOptions{})
		return err == nil && len(c.Webhooks) > 0 && c.Webhooks[0].ClientConfig.URL != nil &&
			strings.HasPrefix(*c.Webhooks[0].ClientConfig.URL, "https://"+rs.Front.Addr()+"/")
	})

	const n = 10
	client := cp.Dynamic(t).Resource(widgetGVR).Namespace(ns)
	for i := range n {
		name := fmt.Sprintf("w-%02d", i)
		if _, err := client.Create(context.Background(), widget(ns, name, map[string]any{"size": int64(1)}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the create of "+name, func() bool { return count("create "+name) > 0 })
		patch := []byte(`{"spec":{"size":2}}`)
		if _, err := client.Patch(context.Background(), name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the update of "+name, func() bool { return count(fmt.Sprintf("update %s 2", name)) > 0 })
	}
	// The last object's deliveries are in; a duplicate from the follower's
	// session of any earlier one would be in by now too.
	mu.Lock()
	defer mu.Unlock()
	for key, times := range got {
		if times != 1 {
			t.Errorf("%s delivered %d times, want once", key, times)
		}
	}
	if len(got) != 2*n {
		t.Errorf("%d deliveries, want %d (a create and an update of each widget): %v", len(got), 2*n, got)
	}
}
