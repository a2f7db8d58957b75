package e2e

import (
	"slices"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/controlplane"
)

// TestServiceAccountTokenPassesTokenReview checks what the broker will do with
// a handler's bearer token: a TokenRequest token for a ServiceAccount is
// authenticated by TokenReview as system:serviceaccount:NS:NAME, and a made-up
// token is not.
func TestServiceAccountTokenPassesTokenReview(t *testing.T) {
	t.Parallel()
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	ctx := t.Context()

	token, err := cp.ServiceAccountToken(ctx, ns, "handler")
	if err != nil {
		t.Fatal(err)
	}
	// Asking twice reuses the ServiceAccount.
	if _, err := cp.ServiceAccountToken(ctx, ns, "handler"); err != nil {
		t.Fatalf("second token for the same service account: %v", err)
	}

	reviews := cp.Client().AuthenticationV1().TokenReviews()
	review, err := reviews.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating TokenReview: %v", err)
	}
	st := review.Status
	if !st.Authenticated || st.Error != "" {
		t.Fatalf("token not authenticated: %+v", st)
	}
	if want := "system:serviceaccount:" + ns + ":handler"; st.User.Username != want {
		t.Errorf("username %q, want %q", st.User.Username, want)
	}
	for _, g := range []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"} {
		if !slices.Contains(st.User.Groups, g) {
			t.Errorf("groups %v lack %s", st.User.Groups, g)
		}
	}

	// The token also works as a client credential for that identity.
	cfg := cp.RESTConfig()
	cfg.BearerToken = token
	saClient, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	self, err := saClient.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SelfSubjectReview with the service-account token: %v", err)
	}
	if self.Status.UserInfo.Username != st.User.Username {
		t.Errorf("SelfSubjectReview user %q, TokenReview user %q", self.Status.UserInfo.Username, st.User.Username)
	}

	bad, err := reviews.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: "not-a-token"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating TokenReview for a bad token: %v", err)
	}
	if bad.Status.Authenticated {
		t.Errorf("a made-up token was authenticated as %q", bad.Status.User.Username)
	}
}
