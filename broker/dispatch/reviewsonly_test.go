package dispatch

import (
	"context"
	"errors"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/resource"
	"github.com/tether-dev/tether/broker/session"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func validateBinding() []*binding.Binding {
	var res resource.Resource
	res.GroupVersionResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	return []*binding.Binding{{ID: "validate-0", Kind: binding.Validate, Resource: res,
		Admission: binding.AdmissionOptions{Operations: []string{"CREATE"}}}}
}

func everyReplicaInstance(id string) *session.Instance {
	return &session.Instance{Handler: "guard", ID: id, Capabilities: session.Capabilities{
		tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_EVERY_REPLICA}}
}

// TestAFollowerTakesReviewsOnlySessionsFromInstancesOnEveryReplica: a
// replica that does not lead attaches, for reviews only, an instance that
// lists CAPABILITY_EVERY_REPLICA and has admission bindings; it refuses the
// others as before (session.ErrNotLeading).
func TestAFollowerTakesReviewsOnlySessionsFromInstancesOnEveryReplica(t *testing.T) {
	m := New(Options{Informers: informer.New(informer.Options{})}) // not leading: never started
	att, err := m.Attach(t.Context(), everyReplicaInstance("i0"), &tetherv1.Hello{Handler: "guard"}, validateBinding())
	if err != nil || !att.ReviewsOnly || att.Ended == nil {
		t.Fatalf("Attach = %+v, %v; want a reviews-only attachment", att, err)
	}
	if m.Binding("guard", "validate-0") == nil {
		t.Error("the follower does not know the binding of its reviews-only instance")
	}
	old := &session.Instance{Handler: "old", ID: "i0"}
	if _, err := m.Attach(t.Context(), old, &tetherv1.Hello{Handler: "old"}, validateBinding()); !errors.Is(err, session.ErrNotLeading) {
		t.Errorf("Attach of an instance without the capability = %v, want session.ErrNotLeading", err)
	}
	lifecycleOnly := everyReplicaInstance("i1")
	lifecycleOnly.Handler = "lifecycle"
	var res resource.Resource
	res.GroupVersionResource = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	if _, err := m.Attach(t.Context(), lifecycleOnly, &tetherv1.Hello{Handler: "lifecycle"},
		[]*binding.Binding{{ID: "create-0", Kind: binding.Create, Resource: res}}); !errors.Is(err, session.ErrNotLeading) {
		t.Errorf("Attach of an instance with no admission binding = %v, want session.ErrNotLeading", err)
	}
	other := []*binding.Binding{{ID: "validate-1", Kind: binding.Validate, Resource: res}}
	if _, err := m.Attach(t.Context(), everyReplicaInstance("i2"), &tetherv1.Hello{Handler: "guard"}, other); !errors.Is(err, session.ErrTryLater) {
		t.Errorf("Attach with other bindings while one is connected = %v, want session.ErrTryLater", err)
	}
}

// TestAReplicaComingToLeadEndsItsReviewsOnlySessions: Start (this replica
// leads) ends the reviews-only sessions, and until the handler has a
// controller its reviews wait for an instance with the binding known, so
// that the failure policy is not applied for a handler merely reconnecting.
func TestAReplicaComingToLeadEndsItsReviewsOnlySessions(t *testing.T) {
	m := New(Options{Informers: informer.New(informer.Options{})})
	in := everyReplicaInstance("i0")
	att, err := m.Attach(t.Context(), in, &tetherv1.Hello{Handler: "guard"}, validateBinding())
	if err != nil {
		t.Fatal(err)
	}
	startLeading(t, m)
	select {
	case <-att.Ended:
	case <-time.After(5 * time.Second):
		t.Fatal("the reviews-only session was not ended when the replica came to lead")
	}
	att.Detach() // the session ended

	rctx, rcancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer rcancel()
	req := &admissionv1.AdmissionRequest{Operation: admissionv1.Create}
	_, b, err := m.Review(rctx, "guard", "validate-0", req)
	if b == nil || !errors.Is(err, admission.ErrNoInstance) {
		t.Errorf("Review = binding %v, %v; want the binding known and admission.ErrNoInstance at the deadline", b, err)
	}
}

// TestAWaitingReviewMovesToTheHandlersController: a review waiting on the
// reviews-only instances of a replica that came to lead is looked up again
// once an instance attaches fully, and waits there.
func TestAWaitingReviewMovesToTheHandlersController(t *testing.T) {
	m := New(Options{Informers: informer.New(informer.Options{})})
	att, err := m.Attach(t.Context(), everyReplicaInstance("i0"), &tetherv1.Hello{Handler: "guard"}, validateBinding())
	if err != nil {
		t.Fatal(err)
	}
	att.Detach()
	rv, _, superseded := m.admissionBinding("guard", "validate-0")
	startLeading(t, m)
	waited := make(chan error, 1)
	go func() {
		_, err := rv.send(t.Context(), "", &tetherv1.Delivery{Id: "d0"}, superseded)
		waited <- err
	}()
	eventuallyLeads(t, m)
	full := everyReplicaInstance("i0")
	if _, err := m.Attach(t.Context(), full, &tetherv1.Hello{Handler: "guard"}, validateBinding()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-waited:
		if !errors.Is(err, errSuperseded) {
			t.Errorf("the waiting review ended with %v, want errSuperseded (to be sent again)", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting review was not moved to the handler's controller")
	}
	if rv2, _, s := m.admissionBinding("guard", "validate-0"); rv2 == rv || s != nil {
		t.Error("the handler's reviews are still answered by its reviews-only instances")
	}
}

// startLeading runs m's Start, as a replica that comes to lead, until the
// test ends.
func startLeading(t *testing.T, m *Manager) {
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
}

func eventuallyLeads(t *testing.T, m *Manager) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.ctx != nil, nil
	})
	if err != nil {
		t.Fatalf("the Manager did not start: %v", err)
	}
}

// TestAFollowerKnowsTheRecordedReviewsBeforeAnInstanceComes: the admission
// bindings a follower learns from a handler's Lease (knowReviews, from
// KeepWarm) make a review wait for an instance, then go to the one that
// attaches.
func TestAFollowerKnowsTheRecordedReviewsBeforeAnInstanceComes(t *testing.T) {
	m := New(Options{Informers: informer.New(informer.Options{})})
	m.knowReviews("guard", validateBinding())
	rv, b, superseded := m.admissionBinding("guard", "validate-0")
	if b == nil {
		t.Fatal("the follower does not know the recorded binding")
	}
	rctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := rv.send(rctx, "", &tetherv1.Delivery{Id: "d0"}, superseded); !errors.Is(err, admission.ErrNoInstance) {
		t.Errorf("a review with no instance yet ended with %v, want admission.ErrNoInstance at its deadline", err)
	}
	if _, err := m.Attach(t.Context(), everyReplicaInstance("i0"), &tetherv1.Hello{Handler: "guard"}, validateBinding()); err != nil {
		t.Fatal(err)
	}
	if rv2, _, _ := m.admissionBinding("guard", "validate-0"); rv2 != rv || rv.pool.len() != 1 {
		t.Error("the instance that attached does not answer the recorded handler's reviews")
	}
}
