package auth

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker/binding"
)

// Options configure an Authenticator. Client is required.
type Options struct {
	Client kubernetes.Interface
	// CacheTTL is how long a reviewed token is trusted before it is
	// reviewed again (default 1 minute).
	CacheTTL time.Duration
}

// Authenticator reviews bearer tokens and bindings.
type Authenticator struct {
	opts Options

	mu    sync.Mutex
	cache map[[32]byte]cached
}

type cached struct {
	user    authenticationv1.UserInfo
	expires time.Time
}

// New returns an Authenticator.
func New(opts Options) *Authenticator {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = time.Minute
	}
	return &Authenticator{opts: opts, cache: map[[32]byte]cached{}}
}

type userKey struct{}

// User is the identity a stream authenticated as.
func User(ctx context.Context) (authenticationv1.UserInfo, bool) {
	u, ok := ctx.Value(userKey{}).(authenticationv1.UserInfo)
	return u, ok
}

// StreamInterceptor authenticates every stream before its handler runs.
func (a *Authenticator) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if strings.HasPrefix(info.FullMethod, "/grpc.") {
			return handler(srv, ss) // health and reflection need no identity
		}
		user, err := a.authenticate(ss.Context())
		if err != nil {
			return err
		}
		return handler(srv, &authedStream{ServerStream: ss, ctx: context.WithValue(ss.Context(), userKey{}, user)})
	}
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

func (a *Authenticator) authenticate(ctx context.Context) (authenticationv1.UserInfo, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			token = strings.TrimSpace(t)
		}
	}
	if token == "" {
		return authenticationv1.UserInfo{}, status.Error(codes.Unauthenticated, "a bearer token is required (authorization: Bearer <ServiceAccount token>)")
	}
	key := sha256.Sum256([]byte(token))
	a.mu.Lock()
	c, ok := a.cache[key]
	a.mu.Unlock()
	if ok && time.Now().Before(c.expires) {
		return c.user, nil
	}
	tr, err := a.opts.Client.AuthenticationV1().TokenReviews().Create(ctx,
		&authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, status.Errorf(codes.Unavailable, "reviewing the token: %v", err)
	}
	if !tr.Status.Authenticated {
		msg := tr.Status.Error
		if msg == "" {
			msg = "the API server does not accept it"
		}
		return authenticationv1.UserInfo{}, status.Errorf(codes.Unauthenticated, "invalid token: %s", msg)
	}
	a.mu.Lock()
	a.cache[key] = cached{user: tr.Status.User, expires: time.Now().Add(a.opts.CacheTTL)}
	a.mu.Unlock()
	return tr.Status.User, nil
}

// ErrDenied marks a binding the handler's identity may not have.
var ErrDenied = errors.New("permission denied")

// Authorize asks SubjectAccessReview, for each binding, whether the
// stream's user may list and watch its resource in its namespaces (the
// whole cluster when it names none), and patch it where the binding writes.
func (a *Authenticator) Authorize(ctx context.Context, bindings []*binding.Binding) error {
	user, ok := User(ctx)
	if !ok {
		return fmt.Errorf("%w: the stream is not authenticated", ErrDenied)
	}
	for i, b := range bindings {
		namespaces := b.Namespaces
		if len(namespaces) == 0 {
			namespaces = []string{""}
		}
		for _, ns := range namespaces {
			for _, verb := range verbs(b.Kind) {
				if err := a.check(ctx, user, ns, verb, b.Resource.GroupVersionResource); err != nil {
					return &binding.FieldError{Index: i, ID: b.ID, Field: "resource", Err: err}
				}
			}
		}
		// A webhook can refuse or change every request on its resource: the
		// broker writes one only for a handler that could write it itself.
		if cfg, ok := webhookConfigurations[b.Kind]; ok {
			if err := a.check(ctx, user, "", "create", cfg); err != nil {
				return &binding.FieldError{Index: i, ID: b.ID, Field: "kind", Err: err}
			}
		}
	}
	return nil
}

var webhookConfigurations = map[binding.Kind]schema.GroupVersionResource{
	binding.Validate: {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingwebhookconfigurations"},
	binding.Mutate:   {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingwebhookconfigurations"},
}

// verbs a binding needs: it is watched; kinds whose acks carry patches write.
func verbs(k binding.Kind) []string {
	switch k {
	case binding.Event, binding.Delete, binding.Daemon, binding.Validate:
		return []string{"list", "watch"}
	default:
		return []string{"list", "watch", "patch"}
	}
}

func (a *Authenticator) check(ctx context.Context, user authenticationv1.UserInfo, ns, verb string, gvr schema.GroupVersionResource) error {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range user.Extra {
		extra[k] = authorizationv1.ExtraValue(v)
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user.Username, Groups: user.Groups, UID: user.UID, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: gvr.Group, Version: gvr.Version, Resource: gvr.Resource,
		},
	}}
	out, err := a.opts.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("checking permissions: %w", err)
	}
	if !out.Status.Allowed {
		where := "cluster-wide"
		if ns != "" {
			where = "in namespace " + ns
		}
		return fmt.Errorf("%w: %s may not %s %s %s", ErrDenied, user.Username, verb, resourceName(gvr), where)
	}
	return nil
}

// resourceName spells gvr as resource.Resource does: "secrets.v1.".
func resourceName(gvr schema.GroupVersionResource) string {
	return gvr.Resource + "." + gvr.Version + "." + gvr.Group
}
