package auth

import (
	"context"
	"crypto/sha256"
	"net"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/limit"
	"github.com/tether-dev/tether/broker/metrics"
)

// Options configure an Authenticator. Client is required; it should be a
// client of its own, so that a flood of bad tokens spends its request
// budget and not the one leader election and presence renew with.
type Options struct {
	Client kube.Interface
	// Namespace is the broker's namespace, where handler names are granted.
	Namespace string
	// Audiences, when set, are sent with every TokenReview, and a token
	// is accepted only when the API server says it is meant for one of
	// them. Empty: the API server's own audiences.
	Audiences []string
	// CacheTTL is how long an accepted token is trusted before it is
	// reviewed again (default 1 minute); RefusedTTL how long a refused one
	// is refused without asking again (default 10 s).
	CacheTTL, RefusedTTL time.Duration
	// MaxCached bounds each cache, of tokens, of allowed rights and of
	// denied ones (default 4096).
	MaxCached int
	// AllowedTTL is how long a right SubjectAccessReview allowed is taken
	// as allowed without asking again (default 10 s), so that the rechecks
	// of many instances of one identity cost one review. A withdrawn right
	// is noticed within the recheck period plus this.
	AllowedTTL time.Duration
	// DeniedTTL is how long a right SubjectAccessReview denied is taken as
	// denied without asking again (default DefaultDeniedTTL), so that Hellos for a name
	// their identity is not granted cost one review in that time, however
	// many. A right granted is noticed within this.
	DeniedTTL time.Duration
	// MaxReviewsPerPeer bounds the TokenReviews in flight for one peer
	// address; a stream past it ends with ResourceExhausted (default 4).
	MaxReviewsPerPeer int
	// Clock is the time source (default the real clock).
	Clock clock.PassiveClock
	// Metrics counts the SubjectAccessReviews asked; nil counts nothing.
	Metrics *metrics.Metrics
}

// DefaultDeniedTTL is how long a denial is remembered unless
// Options.DeniedTTL says otherwise.
const DefaultDeniedTTL = 5 * time.Second

// Authenticator reviews bearer tokens and the rights of handlers.
type Authenticator struct {
	opts Options

	reviews  *expiring[[32]byte, review] // by the token's hash
	inFlight *limit.Counter              // token reviews per peer host
	// allowed and denied are the SubjectAccessReviews' verdicts, by right.
	allowed, denied *expiring[string, struct{}]
}

// review is a cached TokenReview outcome: a user, or the refusal message.
type review struct {
	user    authenticationv1.UserInfo
	refused string
}

// New returns an Authenticator.
func New(opts Options) *Authenticator {
	if opts.CacheTTL <= 0 {
		opts.CacheTTL = time.Minute
	}
	if opts.RefusedTTL <= 0 {
		opts.RefusedTTL = 10 * time.Second
	}
	if opts.MaxCached <= 0 {
		opts.MaxCached = 4096
	}
	if opts.AllowedTTL <= 0 {
		opts.AllowedTTL = 10 * time.Second
	}
	if opts.DeniedTTL <= 0 {
		opts.DeniedTTL = DefaultDeniedTTL
	}
	if opts.MaxReviewsPerPeer <= 0 {
		opts.MaxReviewsPerPeer = 4
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Authenticator{
		opts: opts, reviews: newExpiring[[32]byte, review](opts.MaxCached, opts.Clock),
		inFlight: &limit.Counter{PerKey: opts.MaxReviewsPerPeer},
		allowed:  newExpiring[string, struct{}](opts.MaxCached, opts.Clock),
		denied:   newExpiring[string, struct{}](opts.MaxCached, opts.Clock),
	}
}

type userKey struct{}

// User is the identity a stream authenticated as.
func User(ctx context.Context) (authenticationv1.UserInfo, bool) {
	u, ok := ctx.Value(userKey{}).(authenticationv1.UserInfo)
	return u, ok
}

// WithUser is ctx of a stream authenticated as u.
func WithUser(ctx context.Context, u authenticationv1.UserInfo) context.Context {
	return context.WithValue(ctx, userKey{}, u)
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
		return handler(srv, &authedStream{ServerStream: ss, ctx: WithUser(ss.Context(), user)})
	}
}

type authedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *authedStream) Context() context.Context { return s.ctx }

// authenticate reviews the stream's bearer token, from the cache when it
// was reviewed lately. Its errors are gRPC statuses.
func (a *Authenticator) authenticate(ctx context.Context) (authenticationv1.UserInfo, error) {
	return a.authenticateToken(ctx, bearer(ctx), peerHost(ctx))
}

// authenticateToken reviews token, presented from host, from the cache
// when it was reviewed lately. Its errors are gRPC statuses.
func (a *Authenticator) authenticateToken(ctx context.Context, token, host string) (authenticationv1.UserInfo, error) {
	if token == "" {
		return authenticationv1.UserInfo{}, status.Error(codes.Unauthenticated, "a bearer token is required (authorization: Bearer <ServiceAccount token>)")
	}
	key := sha256.Sum256([]byte(token))
	if r, ok := a.reviews.get(key); ok {
		return r.result()
	}
	if !a.inFlight.Acquire(host) {
		return authenticationv1.UserInfo{}, status.Errorf(codes.ResourceExhausted,
			"more than %d token reviews in flight from %s; retry", a.opts.MaxReviewsPerPeer, host)
	}
	defer a.inFlight.Release(host)
	tr, err := a.opts.Client.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: a.opts.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return authenticationv1.UserInfo{}, status.Errorf(codes.Unavailable, "reviewing the token: %v", err)
	}
	r, ttl := a.judge(tr.Status)
	a.reviews.put(key, r, ttl)
	return r.result()
}

// judge turns a TokenReview's answer into a review, and says how long to
// cache it.
func (a *Authenticator) judge(st authenticationv1.TokenReviewStatus) (review, time.Duration) {
	switch {
	case !st.Authenticated:
		msg := st.Error
		if msg == "" {
			msg = "the API server does not accept it"
		}
		return review{refused: msg}, a.opts.RefusedTTL
	case len(a.opts.Audiences) > 0 && !slices.ContainsFunc(st.Audiences, func(s string) bool { return slices.Contains(a.opts.Audiences, s) }):
		return review{refused: "it is not meant for this broker (audiences " + strings.Join(a.opts.Audiences, ", ") + ")"}, a.opts.RefusedTTL
	}
	return review{user: st.User}, a.opts.CacheTTL
}

func (r review) result() (authenticationv1.UserInfo, error) {
	if r.refused != "" {
		return authenticationv1.UserInfo{}, status.Errorf(codes.Unauthenticated, "invalid token: %s", r.refused)
	}
	return r.user, nil
}

func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	var token string
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			token = strings.TrimSpace(t)
		}
	}
	return token
}

// peerHost is the stream's remote address without its port: one client
// opens its streams from many ports.
func peerHost(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return "unknown"
	}
	if host, _, err := net.SplitHostPort(p.Addr.String()); err == nil {
		return host
	}
	return p.Addr.String()
}
