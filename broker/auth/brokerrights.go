package auth

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/metrics"
)

// AggregationLabel marks the ClusterRoles whose rules the broker's
// aggregated ClusterRole tether-broker takes (deploy/broker): the rights on
// the resources one handler binds, installed with that handler. The broker
// itself holds no right on any resource a handler may bind until such a
// role grants it.
const AggregationLabel = "tether.dev/aggregate-to-broker"

// BrokerRights lists what the broker's own identity must be allowed to
// serve bindings: list and watch of every binding's resource in its
// namespaces (its informers), and patch where a binding writes or holds
// (finalizers and its progress annotations are its own writes; a handler's
// patches are written as the handler). Each right once, named after the
// first binding that needs it.
func BrokerRights(bindings []*binding.Binding) []Right {
	var s rightSet
	for i, b := range bindings {
		for _, r := range resourceRights(i, b) {
			s.add(r)
		}
	}
	return s.out
}

// ImpersonateRight is what the broker's own identity must be allowed to
// write a handler's patches and post its Events as the handler
// (impersonation): impersonate on the handler's ServiceAccount, by name, in
// its namespace. The handler's install grants it with a Role there (its
// rule: [ImpersonationRule]); the broker holds no cluster-wide impersonate.
// ok is false for a user that is not a ServiceAccount, which the broker
// never impersonates (its patches are refused).
func ImpersonateRight(user string) (r Right, ok bool) {
	ns, sa, ok := ServiceAccountOf(user)
	if !ok {
		return Right{}, false
	}
	return Right{Namespace: ns, Verb: "impersonate", Resource: serviceAccounts, Name: sa, Binding: -1, Field: "handler"}, true
}

var serviceAccounts = schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}

// ServiceAccountOf parses a ServiceAccount's user name,
// system:serviceaccount:<namespace>:<name>.
func ServiceAccountOf(user string) (namespace, name string, ok bool) {
	rest, ok := strings.CutPrefix(user, "system:serviceaccount:")
	namespace, name, ok2 := strings.Cut(rest, ":")
	return namespace, name, ok && ok2 && namespace != "" && name != "" && !strings.Contains(name, ":")
}

// authorizeBroker asks SelfSubjectAccessReview, with the broker's own
// client, whether it may impersonate user ([ImpersonateRight]) and for
// every right of [BrokerRights]; verdicts are cached as a handler's are,
// under an identity no token can have. A missing right is an error naming
// the rule to grant, a FieldError naming the binding for a binding's.
func (a *Authenticator) authorizeBroker(ctx context.Context, user authenticationv1.UserInfo, bindings []*binding.Binding) error {
	if r, ok := ImpersonateRight(user.Username); ok {
		if err := a.checkSelf(ctx, r); err != nil {
			if errors.Is(err, ErrDenied) {
				err = fmt.Errorf("%w; %s", err, ImpersonationRule(r.Namespace, r.Name))
			}
			return fmt.Errorf("%s: %w", r.Field, err)
		}
	}
	for _, r := range BrokerRights(bindings) {
		if err := a.checkSelf(ctx, r); err != nil {
			b := bindings[r.Binding]
			if errors.Is(err, ErrDenied) {
				err = fmt.Errorf("%w; %s", err, ruleToGrant(b))
			}
			return &binding.FieldError{Index: r.Binding, ID: b.ID, Field: r.Field, Err: err}
		}
	}
	return nil
}

func (a *Authenticator) checkSelf(ctx context.Context, r Right) error {
	key := "\x00broker\x00" + rightKey(authenticationv1.UserInfo{}, r)
	switch {
	case a.allowed.has(key):
		return nil
	case a.denied.has(key):
		return brokerDenial(r)
	}
	ssar := &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: r.Namespace, Verb: r.Verb, Group: r.Resource.Group, Version: r.Resource.Version, Resource: r.Resource.Resource,
			Name: r.Name,
		},
	}}
	out, err := a.opts.Client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, ssar, metav1.CreateOptions{})
	if err != nil {
		a.opts.Metrics.SignIn().Reviewed(metrics.AccessError)
		return fmt.Errorf("checking the broker's own permissions: %w", err)
	}
	if a.answered(key, out.Status.Allowed) {
		return nil
	}
	return brokerDenial(r)
}

// brokerDenial is the error of a right the broker itself lacks.
func brokerDenial(r Right) error {
	where := "cluster-wide"
	if r.Namespace != "" {
		where = "in namespace " + r.Namespace
	}
	what := resourceName(r.Resource)
	if r.Name != "" {
		what += " " + r.Name
	}
	return fmt.Errorf("%w: the broker itself may not %s %s %s", ErrDenied, r.Verb, what, where)
}

// ImpersonationRule spells the Role that lets the broker act as the
// ServiceAccount namespace/name.
func ImpersonationRule(namespace, name string) string {
	return fmt.Sprintf(`grant it to the broker's ServiceAccount with a Role in namespace %s and the rule apiGroups: [""], resources: ["serviceaccounts"], resourceNames: [%q], verbs: [impersonate]`,
		namespace, name)
}

// ruleToGrant spells the ClusterRole rule that lets the broker serve b.
func ruleToGrant(b *binding.Binding) string {
	v := append([]string{"get"}, verbs(b)...)
	return fmt.Sprintf(`grant it to the broker's ServiceAccount with a ClusterRole labelled %s: "true" and the rule apiGroups: [%q], resources: [%q], verbs: [%s]`,
		AggregationLabel, b.Resource.Group, b.Resource.Resource, strings.Join(v, ", "))
}
