package auth

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// reviewer is a fake API server's TokenReview: tokens starting with "good"
// are user alice, meant for the audience "api"; others are refused.
type reviewer struct {
	reviews atomic.Int32
	block   chan struct{} // when set, each review waits for it
	seen    chan []string // the audiences each review asked for
}

func (r *reviewer) client() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r.reviews.Add(1)
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if r.seen != nil {
			r.seen <- tr.Spec.Audiences
		}
		if r.block != nil {
			<-r.block
		}
		out := tr.DeepCopy()
		if strings.HasPrefix(tr.Spec.Token, "good") {
			out.Status = authenticationv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"api"},
				User: authenticationv1.UserInfo{Username: "alice"}}
		} else {
			out.Status = authenticationv1.TokenReviewStatus{Error: "bad signature"}
		}
		return true, out, nil
	})
	return c
}

// streamContext is what a stream from host with token looks like.
func streamContext(host, token string) context.Context {
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("authorization", "Bearer "+token))
	return peer.NewContext(ctx, &peer.Peer{Addr: &net.TCPAddr{IP: net.ParseIP(host), Port: 40000}})
}

func TestRefusedTokensAreNotReviewedAgainForAWhile(t *testing.T) {
	var r reviewer
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	a := New(Options{Client: kubetest.Wrap(r.client()), Clock: clk, RefusedTTL: 10 * time.Second})
	for range 50 {
		_, err := a.authenticate(streamContext("10.0.0.1", "forged"))
		if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "bad signature") {
			t.Fatalf("authenticate = %v, want Unauthenticated saying why", err)
		}
	}
	if n := r.reviews.Load(); n != 1 {
		t.Errorf("%d TokenReviews for 50 streams with one bad token, want 1", n)
	}
	clk.SetTime(clk.Now().Add(11 * time.Second))
	_, _ = a.authenticate(streamContext("10.0.0.1", "forged"))
	if n := r.reviews.Load(); n != 2 {
		t.Errorf("%d TokenReviews once the refusal expired, want 2", n)
	}
}

func TestReviewsInFlightAreBoundedPerPeer(t *testing.T) {
	// The fake clientset runs one reaction at a time, so one review is in
	// flight here; the bound is 1.
	r := reviewer{block: make(chan struct{}), seen: make(chan []string, 16)}
	a := New(Options{Client: kubetest.Wrap(r.client()), MaxReviewsPerPeer: 1})
	done := make(chan error, 1)
	go func() {
		_, err := a.authenticate(streamContext("10.0.0.1", "forged-1"))
		done <- err
	}()
	<-r.seen // the review is in flight
	_, err := a.authenticate(streamContext("10.0.0.1", "forged-2"))
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "10.0.0.1") {
		t.Errorf("a second review from one peer: %v, want ResourceExhausted naming the peer", err)
	}
	if !a.inFlight.Acquire("10.0.0.2") {
		t.Error("another peer is held back by the first one's review")
	}
	a.inFlight.Release("10.0.0.2")
	close(r.block)
	if err := <-done; status.Code(err) != codes.Unauthenticated {
		t.Errorf("the review in flight: %v, want Unauthenticated", err)
	}
	if _, err := a.authenticate(streamContext("10.0.0.1", "forged-3")); status.Code(err) != codes.Unauthenticated {
		t.Errorf("once the review ended: %v, want the peer reviewed again (Unauthenticated)", err)
	}
}

func TestTokensForAnotherAudienceAreRefused(t *testing.T) {
	r := reviewer{seen: make(chan []string, 4)}
	a := New(Options{Client: kubetest.Wrap(r.client()), Audiences: []string{"tether"}})
	_, err := a.authenticate(streamContext("10.0.0.1", "good"))
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "not meant for this broker") {
		t.Errorf("a token for audience api: %v, want Unauthenticated saying it is not meant for the broker", err)
	}
	if got := <-r.seen; !slices.Equal(got, []string{"tether"}) {
		t.Errorf("the TokenReview asked for audiences %q, want [tether]", got)
	}
	a = New(Options{Client: kubetest.Wrap(r.client()), Audiences: []string{"tether", "api"}})
	if u, err := a.authenticate(streamContext("10.0.0.1", "good")); err != nil || u.Username != "alice" {
		t.Errorf("a token for one of the audiences: %v, %v; want alice", u.Username, err)
	}
}

func TestExpiredReviewsLeaveTheCache(t *testing.T) {
	var r reviewer
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	a := New(Options{Client: kubetest.Wrap(r.client()), Clock: clk, CacheTTL: time.Minute, MaxCached: 8})
	for i := range 8 {
		if _, err := a.authenticate(streamContext("10.0.0.1", fmt.Sprint("good-", i))); err != nil {
			t.Fatal(err)
		}
	}
	clk.SetTime(clk.Now().Add(2 * time.Minute))
	if _, err := a.authenticate(streamContext("10.0.0.1", "good-new")); err != nil {
		t.Fatal(err)
	}
	if n := a.reviews.len(); n != 1 {
		t.Errorf("%d cached reviews after every other one expired, want 1", n)
	}
	// A full cache of live reviews caches nothing more: it cannot grow.
	for i := range 20 {
		_, _ = a.authenticate(streamContext("10.0.0.1", fmt.Sprint("forged-", i)))
	}
	if n := a.reviews.len(); n > 8 {
		t.Errorf("%d cached reviews, more than MaxCached 8", n)
	}
}

// sarFake answers SubjectAccessReviews on c: a connect of a handler named
// in granted is allowed, every other right too unless denyAll; it counts
// the reviews asked.
type sarFake struct {
	reviews atomic.Int32
	denyAll atomic.Bool
	granted []string
}

func (f *sarFake) install(c *fake.Clientset) {
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		f.reviews.Add(1)
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		ra := sar.Spec.ResourceAttributes
		sar.Status.Allowed = !f.denyAll.Load() && (ra.Verb != VerbConnect || slices.Contains(f.granted, ra.Name))
		return true, sar, nil
	})
}

// TestVerdictsAreNotAskedAgainForAWhile: the rechecks of many instances of
// one identity cost one SubjectAccessReview per right until AllowedTTL
// passes; a flood of Hellos for a name the identity is not granted costs
// one per DeniedTTL, and a right granted or withdrawn is noticed once the
// verdict expires.
func TestVerdictsAreNotAskedAgainForAWhile(t *testing.T) {
	var r reviewer
	c := r.client()
	f := &sarFake{granted: []string{"h"}}
	f.install(c)
	clk := clocktesting.NewFakePassiveClock(time.Unix(0, 0))
	a := New(Options{Client: kubetest.Wrap(c), Clock: clk, Namespace: "tether", AllowedTTL: 10 * time.Second, DeniedTTL: 5 * time.Second})
	ctx := streamContext("10.0.0.1", "good")
	steps := []struct {
		name    string
		advance time.Duration
		handler string
		times   int
		denied  bool
		reviews int32 // in all, after the step
	}{
		{"5 checks of a granted name", 0, "h", 5, false, 1},
		{"50 Hellos for a name not granted", 0, "other", 50, true, 2},
		{"the denial kept within DeniedTTL", 4 * time.Second, "other", 10, true, 2},
		{"the denial expired: asked again", 2 * time.Second, "other", 10, true, 3},
		{"the allowed name still kept", 0, "h", 3, false, 3},
		{"the allowed name expired: asked again", 5 * time.Second, "h", 3, false, 4},
	}
	for _, s := range steps {
		clk.SetTime(clk.Now().Add(s.advance))
		for range s.times {
			err := a.AuthorizeName(ctx, s.handler, 0)
			if got := errors.Is(err, ErrDenied); got != s.denied {
				t.Fatalf("%s: AuthorizeName = %v, want denied %v", s.name, err, s.denied)
			}
			if s.denied && !strings.Contains(err.Error(), "alice may not connect handlers.tether.dev "+s.handler) {
				t.Errorf("%s: a cached denial says %q, want who may not do what", s.name, err)
			}
		}
		if n := f.reviews.Load(); n != s.reviews {
			t.Errorf("%s: %d SubjectAccessReviews in all, want %d", s.name, n, s.reviews)
		}
	}
}

// TestDenialsDoNotCrowdOutAllowedRights: a full cache of denials (a
// stranger naming handler after handler) leaves room for the allowed
// rights of the identities that are granted.
func TestDenialsDoNotCrowdOutAllowedRights(t *testing.T) {
	var r reviewer
	c := r.client()
	f := &sarFake{granted: []string{"h"}}
	f.install(c)
	a := New(Options{Client: kubetest.Wrap(c), Namespace: "tether", MaxCached: 8})
	ctx := streamContext("10.0.0.1", "good")
	for i := range 20 {
		if err := a.AuthorizeName(ctx, fmt.Sprint("stranger-", i), 0); !errors.Is(err, ErrDenied) {
			t.Fatalf("a name not granted: %v, want ErrDenied", err)
		}
	}
	before := f.reviews.Load()
	for range 5 {
		if err := a.AuthorizeName(ctx, "h", 0); err != nil {
			t.Fatal(err)
		}
	}
	if n := f.reviews.Load() - before; n != 1 {
		t.Errorf("%d SubjectAccessReviews for 5 checks of a granted name after a flood of denials, want 1", n)
	}
}

// TestTakeoverNeedsItsGrant: an identity that may connect as h but not
// "takeover" it is refused a priority above 0, and the refusal names the
// Hello field and the verb; at priority 0 the grant is not asked for.
func TestTakeoverNeedsItsGrant(t *testing.T) {
	var r reviewer
	c := r.client()
	var verbs []string
	c.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		verbs = append(verbs, sar.Spec.ResourceAttributes.Verb)
		sar.Status.Allowed = sar.Spec.ResourceAttributes.Verb != VerbTakeover
		return true, sar, nil
	})
	a := New(Options{Client: kubetest.Wrap(c), Namespace: "tether"})
	ctx := context.WithValue(streamContext("10.0.0.1", "good"), userKey{}, authenticationv1.UserInfo{Username: "alice"})
	if err := a.Authorize(ctx, "h", 0, nil); err != nil || slices.Contains(verbs, VerbTakeover) {
		t.Fatalf("priority 0: %v, asked for %v; want allowed without asking for takeover", err, verbs)
	}
	err := a.Authorize(ctx, "h", 1, nil)
	if !errors.Is(err, ErrDenied) || !strings.HasPrefix(err.Error(), "priority: ") ||
		!strings.Contains(err.Error(), "alice may not takeover handlers.tether.dev h in namespace tether") {
		t.Errorf("priority 1 without the grant: %v, want ErrDenied naming priority and the takeover verb", err)
	}
}
