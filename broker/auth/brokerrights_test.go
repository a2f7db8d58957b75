package auth

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// TestABindingTheBrokerCannotServeIsRefused: a handler granted everything
// is refused a binding on a resource the broker's own identity may not
// patch, with an error naming the binding and the ClusterRole rule to add;
// the broker's verdicts are cached as a handler's are, and a right granted
// to the broker is noticed once the denial expires.
func TestABindingTheBrokerCannotServeIsRefused(t *testing.T) {
	var r reviewer
	c := r.client()
	(&sarFake{granted: []string{"h"}}).install(c)
	var selfReviews atomic.Int32
	var brokerMayPatch atomic.Bool
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		selfReviews.Add(1)
		ssar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := ssar.Spec.ResourceAttributes
		ssar.Status.Allowed = ra.Resource == "widgets" && (ra.Verb != "patch" || brokerMayPatch.Load())
		return true, ssar, nil
	})
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	a := New(Options{Client: kubetest.Wrap(c), Clock: clk, Namespace: "tether", DeniedTTL: 5 * time.Second})
	ctx := streamContext("10.0.0.1", "good")
	bs := []*binding.Binding{
		{ID: "watch", Kind: binding.Event, Resource: widgets, Namespaces: []string{"a"}},
		{ID: "hold", Kind: binding.Delete, Policy: binding.PolicyHold, Resource: widgets, Namespaces: []string{"a"}},
	}
	err := a.Authorize(ctx, "h", 0, bs)
	var fe *binding.FieldError
	if !errors.Is(err, ErrDenied) || !errors.As(err, &fe) || fe.Index != 1 || fe.Field != "resource" {
		t.Fatalf("Authorize = %v, want ErrDenied on bindings[1].resource", err)
	}
	for _, says := range []string{
		"the broker itself may not patch widgets.v1.test.tether.dev in namespace a",
		`ClusterRole labelled tether.dev/aggregate-to-broker: "true"`,
		`apiGroups: ["test.tether.dev"], resources: ["widgets"], verbs: [get, list, watch, patch]`,
	} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("the refusal %q does not say %q", err, says)
		}
	}
	asked := selfReviews.Load()
	if err := a.Authorize(ctx, "h", 0, bs); !errors.Is(err, ErrDenied) || selfReviews.Load() != asked {
		t.Errorf("within DeniedTTL: %v after %d more reviews, want the cached denial", err, selfReviews.Load()-asked)
	}
	brokerMayPatch.Store(true)
	clk.SetTime(clk.Now().Add(6 * time.Second))
	if err := a.Authorize(ctx, "h", 0, bs); err != nil {
		t.Errorf("the broker granted patch, the denial expired: %v, want allowed", err)
	}
	if err := a.AuthorizeName(ctx, "h", 0); err != nil {
		t.Errorf("AuthorizeName: %v", err)
	}
}

// TestAHandlerTheBrokerCannotActAsIsRefused: a ServiceAccount handler
// granted everything is refused when the broker's own identity may not
// impersonate that ServiceAccount (SelfSubjectAccessReview of impersonate
// on serviceaccounts by name, in its namespace), with an error naming the
// Role rule its install must grant; a user that is no ServiceAccount is
// never impersonated and not asked for.
func TestAHandlerTheBrokerCannotActAsIsRefused(t *testing.T) {
	var r reviewer
	c := r.client()
	(&sarFake{granted: []string{"h"}}).install(c)
	var asked []authorizationv1.ResourceAttributes
	var mayImpersonate atomic.Bool
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		ssar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		ra := ssar.Spec.ResourceAttributes
		asked = append(asked, *ra)
		ssar.Status.Allowed = ra.Resource == "widgets" || (ra.Verb == "impersonate" && mayImpersonate.Load())
		return true, ssar, nil
	})
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	a := New(Options{Client: kubetest.Wrap(c), Clock: clk, Namespace: "tether", DeniedTTL: 5 * time.Second})
	bs := []*binding.Binding{{ID: "watch", Kind: binding.Event, Resource: widgets, Namespaces: []string{"a"}}}
	sa := authenticationv1.UserInfo{Username: "system:serviceaccount:apps:h-handler", Groups: []string{"system:serviceaccounts"}}
	err := a.AuthorizeRecorded(context.Background(), sa, "h", bs)
	if !errors.Is(err, ErrDenied) {
		t.Fatalf("AuthorizeRecorded = %v, want ErrDenied", err)
	}
	for _, says := range []string{
		"handler: ",
		"the broker itself may not impersonate serviceaccounts.v1. h-handler in namespace apps",
		`a Role in namespace apps and the rule apiGroups: [""], resources: ["serviceaccounts"], resourceNames: ["h-handler"], verbs: [impersonate]`,
	} {
		if !strings.Contains(err.Error(), says) {
			t.Errorf("the refusal %q does not say %q", err, says)
		}
	}
	want := authorizationv1.ResourceAttributes{Namespace: "apps", Verb: "impersonate", Version: "v1", Resource: "serviceaccounts", Name: "h-handler"}
	if len(asked) == 0 || asked[0] != want {
		t.Errorf("the broker asked %v first, want %v", asked, want)
	}
	mayImpersonate.Store(true)
	clk.SetTime(clk.Now().Add(6 * time.Second))
	if err := a.AuthorizeRecorded(context.Background(), sa, "h", bs); err != nil {
		t.Errorf("the broker granted impersonate, the denial expired: %v, want allowed", err)
	}
	asked = nil
	if err := a.AuthorizeRecorded(context.Background(), authenticationv1.UserInfo{Username: "alice"}, "h", bs); err != nil {
		t.Errorf("a user: %v", err)
	}
	for _, ra := range asked {
		if ra.Verb == "impersonate" {
			t.Errorf("for a user that is no ServiceAccount the broker asked %v", ra)
		}
	}
}
