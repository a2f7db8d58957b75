package auth

import (
	"context"
	"errors"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// TestAuthorizeRecorded: the identity a presence Lease records is held to
// the rights of a Hello before the handler is restored from it. A user
// granted the name and every binding's rights passes; one denied the name,
// or a binding's right, is denied (ErrDenied, naming what); a Lease that
// records no user is denied without a review; the API server not answering
// the review is not a denial, so that the restore can try again.
func TestAuthorizeRecorded(t *testing.T) {
	sa := authenticationv1.UserInfo{Username: "system:serviceaccount:apps:h", Groups: []string{"system:serviceaccounts"}}
	hold := []*binding.Binding{{ID: "hold", Kind: binding.Delete, Policy: binding.PolicyHold, Resource: widgets, Namespaces: []string{"a"}}}
	for _, tc := range []struct {
		name string
		user authenticationv1.UserInfo
		// may says whether the API server allows a review of the user's
		// right: verb on resource, named name.
		may func(verb, resource, name string) bool
		// down makes the API server fail every review.
		down bool
		// denied: the error must wrap ErrDenied and say this; "" means no
		// error.
		denied string
	}{
		{name: "allowed", user: sa, may: func(string, string, string) bool { return true }},
		{name: "denied the name", user: sa, denied: "handler: permission denied: system:serviceaccount:apps:h may not connect handlers.tether.dev h",
			may: func(verb, _, _ string) bool { return verb != VerbConnect }},
		{name: "denied a binding", user: sa, denied: "may not patch widgets.v1.test.tether.dev in namespace a",
			may: func(verb, resource, _ string) bool { return resource != "widgets" || verb != "patch" }},
		{name: "no user recorded", denied: "the lease records no identity",
			may: func(string, string, string) bool { return true }},
		{name: "API server not answering", user: sa, down: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fake.NewClientset()
			var asked []string
			c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if tc.down {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				}
				sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
				ra := sar.Spec.ResourceAttributes
				asked = append(asked, sar.Spec.User)
				sar.Status.Allowed = sar.Spec.User == tc.user.Username && tc.may(ra.Verb, ra.Resource, ra.Name)
				return true, sar, nil
			})
			c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
				ssar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
				ssar.Status.Allowed = true
				return true, ssar, nil
			})
			a := New(Options{Client: kubetest.Wrap(c), Namespace: "tether"})
			err := a.AuthorizeRecorded(context.Background(), tc.user, "h", hold)
			switch {
			case tc.down:
				if err == nil || errors.Is(err, ErrDenied) {
					t.Errorf("AuthorizeRecorded = %v, want an error that is not a denial", err)
				}
			case tc.denied == "":
				if err != nil {
					t.Errorf("AuthorizeRecorded = %v, want allowed", err)
				}
			case !errors.Is(err, ErrDenied) || !strings.Contains(err.Error(), tc.denied):
				t.Errorf("AuthorizeRecorded = %v, want ErrDenied saying %q", err, tc.denied)
			}
			if tc.user.Username == "" && len(asked) > 0 {
				t.Errorf("%d reviews asked for a lease that records no user, want none", len(asked))
			}
		})
	}
}
