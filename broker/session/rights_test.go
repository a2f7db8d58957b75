package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// rights is an Authorize whose answer a test changes.
type rights struct {
	calls    atomic.Int32
	priority atomic.Int32 // asked for at the last call
	deny     atomic.Bool
	fail     atomic.Bool // an error that says nothing about the rights
}

func (r *rights) authorize(_ context.Context, handler string, priority int32, _ []*binding.Binding) error {
	r.calls.Add(1)
	r.priority.Store(priority)
	switch {
	case r.deny.Load():
		return fmt.Errorf("%w: may not connect handlers.tether.dev %s", auth.ErrDenied, handler)
	case r.fail.Load():
		return errors.New("the API server is unreachable")
	}
	return nil
}

func TestWithdrawnRightsEndTheSession(t *testing.T) {
	var r rights
	h := start(t, Options{Authorize: r.authorize, RecheckEvery: 20 * time.Millisecond})
	c, _ := h.session(t)

	// Rechecks that cannot reach the API server keep the session.
	r.fail.Store(true)
	for start := r.calls.Load(); r.calls.Load() < start+3; {
		select {
		case <-c.ended:
			t.Fatalf("the session ended on an unanswered recheck: %v", c.err)
		case <-time.After(time.Millisecond):
		}
	}
	r.deny.Store(true)
	st := c.end()
	if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "rights withdrawn") || !strings.Contains(st.Message(), "secret-ttl") {
		t.Errorf("ended with %v %q, want PermissionDenied saying the rights were withdrawn", st.Code(), st.Message())
	}
}

func TestHelloIsRefusedWithoutTheRights(t *testing.T) {
	var r rights
	r.deny.Store(true)
	h := start(t, Options{Authorize: r.authorize})
	c := h.connect(t)
	c.send(hello())
	if st := c.end(); st.Code() != codes.PermissionDenied {
		t.Errorf("ended with %v %q, want PermissionDenied", st.Code(), st.Message())
	}
}

// TestReviewsKeepAShareOfTheWindow: on an instance with admission
// bindings, lifecycle deliveries leave a quarter of the window free, so
// that slow lifecycle work cannot make the API server's reviews wait past
// their timeout; a review may take any slot.
func TestReviewsKeepAShareOfTheWindow(t *testing.T) {
	h := start(t, Options{Supported: AllKinds})
	validate := func(hl *tetherv1.Hello) {
		hl.Bindings = append(hl.Bindings, &tetherv1.Binding{Id: "check", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}})
	}
	c, in := h.session(t, withWindow(4), validate)
	var lifecycle []<-chan result
	for i := range 3 {
		lifecycle = append(lifecycle, deliver(context.Background(), in, fmt.Sprint("create-", i)))
		c.delivery()
	}
	blocked := deliver(context.Background(), in, "create-3")
	review := make(chan result, 1)
	go func() {
		ack, err := in.Deliver(context.Background(), &tetherv1.Delivery{Id: "review", BindingId: "check", Kind: tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION})
		review <- result{"review", ack, err}
	}()
	if d := c.delivery(); d.GetId() != "review" {
		t.Fatalf("delivery %s, want the review in the reserved slot", d.GetId())
	}
	pending(t, blocked)
	c.ack("review", tetherv1.Outcome_OUTCOME_OK)
	await(t, review)
	c.ack("create-0", tetherv1.Outcome_OUTCOME_OK)
	await(t, lifecycle[0])
	if d := c.delivery(); d.GetId() != "create-3" {
		t.Fatalf("delivery %s, want create-3 once a lifecycle slot freed", d.GetId())
	}
	for _, id := range []string{"create-1", "create-2", "create-3"} {
		c.ack(id, tetherv1.Outcome_OUTCOME_OK)
	}
	await(t, blocked)
}

func TestReviewReserve(t *testing.T) {
	for n, want := range map[int]int{1: 0, 2: 1, 4: 1, 7: 1, 8: 2, 16: 4, 1024: 256} {
		if got := reviewReserve(n); got != want {
			t.Errorf("reviewReserve(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestInstancesOfAHandlerAreBounded(t *testing.T) {
	h := start(t, Options{MaxInstances: 2})
	first, _ := h.session(t, func(hl *tetherv1.Hello) { hl.InstanceId = "a" })
	h.session(t, func(hl *tetherv1.Hello) { hl.InstanceId = "b" })
	c := h.connect(t)
	c.send(hello(func(hl *tetherv1.Hello) { hl.InstanceId = "c" }))
	if st := c.end(); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), "2 instances connected") {
		t.Errorf("a third instance: %v %q, want ResourceExhausted", st.Code(), st.Message())
	}
	// Another handler is not held back, and a place frees when one leaves.
	h.session(t, func(hl *tetherv1.Hello) { hl.Handler, hl.InstanceId = "other", "a" })
	first.cancel()
	<-h.attacher.detached
	// leave runs just after Detach: until then the place may still be taken.
	deadline := time.Now().Add(wait)
	for {
		c := h.connect(t)
		c.send(hello(func(hl *tetherv1.Hello) { hl.InstanceId = "c" }))
		select {
		case msg := <-c.msgs:
			if msg.GetWelcome() == nil {
				t.Fatalf("got %v, want welcome", msg)
			}
			h.instance(t)
			return
		case <-c.ended:
			if status.Code(c.err) != codes.ResourceExhausted || time.Now().After(deadline) {
				t.Fatalf("no place for an instance after one left: %v", c.err)
			}
		}
	}
}

func TestHelloWithTooManyNamespacesInAllIsRefused(t *testing.T) {
	h := start(t, Options{})
	c := h.connect(t)
	c.send(hello(func(hl *tetherv1.Hello) {
		hl.Bindings = nil
		for i := range 6 {
			b := &tetherv1.Binding{Id: fmt.Sprint("b", i), Kind: tetherv1.BindingKind_BINDING_KIND_CREATE,
				Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}}
			for j := range tetherv1.MaxNamespaces {
				b.Namespaces = append(b.Namespaces, fmt.Sprint("ns-", j))
			}
			hl.Bindings = append(hl.Bindings, b)
		}
	}))
	if st := c.end(); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "600 namespaces in all") {
		t.Errorf("ended with %v %q, want InvalidArgument counting the namespaces", st.Code(), st.Message())
	}
}

func TestAnAdmissionBindingNamingAnExcludedNamespaceIsRefusedAtHello(t *testing.T) {
	h := start(t, Options{Supported: AllKinds, ExcludedNamespaces: []string{"kube-node-lease", "kube-system", "tether-system"}})
	c := h.connect(t)
	c.send(hello(func(hl *tetherv1.Hello) {
		hl.Bindings = append(hl.Bindings, &tetherv1.Binding{Id: "check", Kind: tetherv1.BindingKind_BINDING_KIND_VALIDATE,
			Resource: &tetherv1.Resource{Version: "v1", Resource: "secrets"}, Namespaces: []string{"team-a", "kube-system"}})
	}))
	if st := c.end(); st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), `("check").namespaces: "kube-system"`) {
		t.Errorf("ended with %v %q, want InvalidArgument naming the binding and the namespace", st.Code(), st.Message())
	}
}
