package auth

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/metrics"
)

// ErrDenied marks a right the handler's identity does not have, or a
// token no longer accepted.
var ErrDenied = errors.New("permission denied")

// Authorize reviews the stream's token again (from the cache when it was
// reviewed lately) and asks SubjectAccessReview for every right of
// [Rights], then SelfSubjectAccessReview for [ImpersonateRight] and every
// right of [BrokerRights]: a handler the broker may not act as, or a
// binding it cannot watch or hold, is refused with the rule to grant, not
// served half. It is called at Hello
// and then while the session lasts, so that withdrawn rights end it. A
// missing right is an error wrapping ErrDenied that names the binding, or
// the Hello field (handler, priority); other errors (the API server
// unreachable) say nothing about the rights.
func (a *Authenticator) Authorize(ctx context.Context, handler string, priority int32, bindings []*binding.Binding) error {
	return a.authorize(ctx, Rights(a.opts.Namespace, handler, priority, bindings), bindings)
}

// AuthorizeName is Authorize for the rights of [HelloRights] alone: the
// handler name and priority, which need no compiled bindings. It is asked
// before the Hello's bindings are compiled, so that an identity not
// granted the name costs one review (none while its denial is cached) and
// no compile.
func (a *Authenticator) AuthorizeName(ctx context.Context, handler string, priority int32) error {
	return a.authorize(ctx, HelloRights(a.opts.Namespace, handler, priority), nil)
}

// AuthorizeRecorded is Authorize for an identity that is not signing in
// but was recorded: the user a handler's presence Lease says its instances
// signed in as, asked before the handler is restored from that Lease, at
// priority 0 (a restored handler has no instance to take work over). The
// Lease is only as trustworthy as whoever may write Leases in the broker's
// namespace, so what it records is held to the same rights as at Hello: no
// user recorded is a denial. Its errors are those of Authorize.
func (a *Authenticator) AuthorizeRecorded(ctx context.Context, user authenticationv1.UserInfo, handler string, bindings []*binding.Binding) error {
	if user.Username == "" {
		return fmt.Errorf("%w: the lease records no identity the handler signed in as", ErrDenied)
	}
	return a.authorizeAs(ctx, user, Rights(a.opts.Namespace, handler, 0, bindings), bindings)
}

func (a *Authenticator) authorize(ctx context.Context, rights []Right, bindings []*binding.Binding) error {
	user, err := a.authenticate(ctx)
	if err != nil {
		if st, ok := status.FromError(err); ok && st.Code() == codes.Unauthenticated {
			return fmt.Errorf("%w: %s", ErrDenied, st.Message())
		}
		return err
	}
	return a.authorizeAs(ctx, user, rights, bindings)
}

// authorizeAs asks whether user has each of rights, then whether the
// broker itself can serve bindings.
func (a *Authenticator) authorizeAs(ctx context.Context, user authenticationv1.UserInfo, rights []Right, bindings []*binding.Binding) error {
	for _, r := range rights {
		err := a.check(ctx, user, r)
		if err == nil {
			continue
		}
		if r.Binding < 0 {
			return fmt.Errorf("%s: %w", r.Field, err)
		}
		b := bindings[r.Binding]
		return &binding.FieldError{Index: r.Binding, ID: b.ID, Field: r.Field, Err: err}
	}
	return a.authorizeBroker(ctx, user, bindings)
}

func (a *Authenticator) check(ctx context.Context, user authenticationv1.UserInfo, r Right) error {
	key := rightKey(user, r)
	switch {
	case a.allowed.has(key):
		return nil
	case a.denied.has(key):
		return denial(user, r)
	}
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
	}}
	if r.Path != "" {
		sar.Spec.NonResourceAttributes = &authorizationv1.NonResourceAttributes{Path: r.Path, Verb: r.Verb}
	} else {
		sar.Spec.ResourceAttributes = &authorizationv1.ResourceAttributes{
			Namespace: r.Namespace, Verb: r.Verb, Group: r.Resource.Group, Version: r.Resource.Version,
			Resource: r.Resource.Resource, Name: r.Name,
		}
	}
	out, err := a.opts.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		a.opts.Metrics.SignIn().Reviewed(metrics.AccessError)
		return fmt.Errorf("checking permissions: %w", err)
	}
	if a.answered(key, out.Status.Allowed) {
		return nil
	}
	return denial(user, r)
}

// answered counts a review's answer and remembers it under key, for as
// long as its cache keeps answers of its kind; it returns the answer.
func (a *Authenticator) answered(key string, allowed bool) bool {
	if allowed {
		a.opts.Metrics.SignIn().Reviewed(metrics.AccessAllowed)
		a.allowed.put(key, struct{}{}, a.opts.AllowedTTL)
		return true
	}
	a.opts.Metrics.SignIn().Reviewed(metrics.AccessDenied)
	a.denied.put(key, struct{}{}, a.opts.DeniedTTL)
	return false
}

// denial is the error of a right user does not have.
func denial(user authenticationv1.UserInfo, r Right) error {
	if r.Path != "" {
		return fmt.Errorf("%w: %s may not %s %s", ErrDenied, user.Username, r.Verb, r.Path)
	}
	where := "cluster-wide"
	if r.Namespace != "" {
		where = "in namespace " + r.Namespace
	}
	what := resourceName(r.Resource)
	if r.Name != "" {
		what += " " + r.Name
	}
	return fmt.Errorf("%w: %s may not %s %s %s", ErrDenied, user.Username, r.Verb, what, where)
}

// rightKey names what one SubjectAccessReview asks: who, and the right.
func rightKey(u authenticationv1.UserInfo, r Right) string {
	parts := []string{u.Username, u.UID, strings.Join(u.Groups, ","), r.Namespace, r.Verb, r.Resource.String(), r.Name, r.Path}
	for _, k := range slices.Sorted(maps.Keys(u.Extra)) {
		parts = append(parts, k+"="+strings.Join(u.Extra[k], ","))
	}
	return strings.Join(parts, "\x00")
}

// resourceName spells gvr as resource.Resource does: "secrets.v1.", and
// "handlers.tether.dev" for the versionless virtual resource.
func resourceName(gvr schema.GroupVersionResource) string {
	if gvr.Version == "" {
		return gvr.Resource + "." + gvr.Group
	}
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}
