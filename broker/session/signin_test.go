package session

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	authenticationv1 "k8s.io/api/authentication/v1"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/resource"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// testUserKey is the metadata under which a test's stream says which
// identity it authenticated as; asTestUser makes it the stream's user, as
// auth's interceptor would.
const testUserKey = "test-user"

func asTestUser(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	md, _ := metadata.FromIncomingContext(ss.Context())
	if u := md.Get(testUserKey); len(u) == 1 {
		return handler(srv, &userStream{ServerStream: ss, ctx: auth.WithUser(ss.Context(), authenticationv1.UserInfo{Username: u[0]})})
	}
	return handler(srv, ss)
}

type userStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *userStream) Context() context.Context { return s.ctx }

// connectAs opens a stream authenticated as user.
func (h *harness) connectAs(t *testing.T, user string) *client {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), testUserKey, user)
	return h.connectCtx(t, ctx)
}

// countingResolver is fakeResolver counting what it resolves.
type countingResolver struct{ n atomic.Int32 }

func (r *countingResolver) Resolve(ctx context.Context, q resource.Query) (resource.Resource, error) {
	r.n.Add(1)
	return fakeResolver{}.Resolve(ctx, q)
}

func (r *rights) authorizeName(ctx context.Context, handler string, priority int32) error {
	return r.authorize(ctx, handler, priority, nil)
}

// TestAHelloForANameNotGrantedCompilesNothing: the name's rights are
// checked first, so that an identity not granted it costs one check, no
// compile (no discovery) and no review of its bindings.
func TestAHelloForANameNotGrantedCompilesNothing(t *testing.T) {
	var name rights
	name.deny.Store(true)
	var res countingResolver
	var full atomic.Int32
	h := start(t, Options{Resolver: &res, AuthorizeName: name.authorizeName,
		Authorize: func(context.Context, string, int32, []*binding.Binding) error { full.Add(1); return nil }})
	c := h.connectAs(t, "stranger")
	c.send(hello())
	if st := c.end(); st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "may not connect handlers.tether.dev secret-ttl") {
		t.Errorf("ended with %v %q, want PermissionDenied naming the handler", st.Code(), st.Message())
	}
	if n, f, r := name.calls.Load(), full.Load(), res.n.Load(); n != 1 || f != 0 || r != 0 {
		t.Errorf("%d name checks, %d checks of the bindings, %d resolves; want 1, 0, 0", n, f, r)
	}
}

// gate is an AuthorizeName that holds every Hello until opened; each
// Hello that reaches it is said on arrived.
type gate struct {
	calls   atomic.Int32
	open    chan struct{}
	arrived chan struct{}
	seen    int32 // arrivals await has taken
}

func newGate() *gate {
	return &gate{open: make(chan struct{}), arrived: make(chan struct{}, 64)}
}

func (g *gate) authorizeName(ctx context.Context, _ string, _ int32) error {
	g.calls.Add(1)
	g.arrived <- struct{}{}
	select {
	case <-g.open:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// await waits until calls Hellos in all have reached the gate.
func (g *gate) await(t *testing.T, calls int32) {
	t.Helper()
	deadline := time.After(wait)
	for g.seen < calls {
		select {
		case <-g.arrived:
			g.seen++
		case <-deadline:
			t.Fatalf("%d Hellos reached the check, want %d", g.seen, calls)
		}
	}
}

// TestHellosUnderWayAreBoundedPerIdentityAndInAll: past either bound a
// Hello is told ResourceExhausted (which SDKs retry) before its name is
// checked; one identity's Hellos do not hold back another's until the
// broker's bound, and the places free when the Hellos are answered.
func TestHellosUnderWayAreBoundedPerIdentityAndInAll(t *testing.T) {
	g := newGate()
	h := start(t, Options{AuthorizeName: g.authorizeName, MaxHellosPerIdentity: 2, MaxHellos: 3})
	var held []*client
	steps := []struct {
		user string
		says string // of a refusal; "" for a Hello held at the check
	}{
		{"alice", ""},
		{"alice", ""},
		{"alice", "alice has 2 Hellos under way, the most one identity may"},
		{"bob", ""},
		{"carol", "the broker has 3 Hellos under way, the most it takes"},
	}
	for i, s := range steps {
		c := h.connectAs(t, s.user)
		c.send(hello(func(hl *tetherv1.Hello) { hl.InstanceId = s.user + string(rune('0'+i)) }))
		if s.says == "" {
			held = append(held, c)
			g.await(t, int32(len(held)))
			continue
		}
		if st := c.end(); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), s.says) {
			t.Errorf("Hello %d of %s: %v %q, want ResourceExhausted saying %q", i, s.user, st.Code(), st.Message(), s.says)
		}
	}
	if n := g.calls.Load(); n != 3 {
		t.Errorf("%d Hellos reached the check, want the 3 within the bounds", n)
	}
	close(g.open)
	for _, c := range held {
		c.welcome()
		h.instance(t)
	}
	// Answered Hellos are no longer under way.
	c := h.connectAs(t, "alice")
	c.send(hello(func(hl *tetherv1.Hello) { hl.InstanceId = "alice-again" }))
	c.welcome()
	h.instance(t)
}
