package sdk_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// replica is a fakeBroker serving on a loopback TCP port, as one broker
// replica of several.
type replica struct {
	*fakeBroker
	addr string
}

func startReplica(t *testing.T, b *fakeBroker) *replica {
	t.Helper()
	r, _ := serveReplica(t, "127.0.0.1:0", b)
	return r
}

// serveReplica serves b at addr (a free loopback port, or a killed
// replica's) with the server options given (TLS), and returns its server
// too, for a test that kills it.
func serveReplica(t *testing.T, addr string, b *fakeBroker, opts ...grpc.ServerOption) (*replica, *grpc.Server) {
	t.Helper()
	b.sessions = make(chan *fakeSession, 16)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(opts...)
	tetherv1.RegisterBrokerServiceServer(srv, b)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return &replica{fakeBroker: b, addr: lis.Addr().String()}, srv
}

// logsOnFailure is a handler's log, shown if the test fails.
func logsOnFailure(t *testing.T) *logSink {
	logs := &logSink{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("handler log:\n%s", logs.String())
		}
	})
	return logs
}

func (r *replica) session(t *testing.T) *fakeSession {
	t.Helper()
	return recv(t, r.sessions, "a session on "+r.addr)
}

// runOn runs h with RoundRobin over the replicas until the test ends.
func runOn(t *testing.T, h *sdk.Handler, replicas ...*replica) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h.Run(ctx, replicas[0].addr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-errc:
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of cancellation", wait)
		}
	})
}

func replicaOptions(t *testing.T, logs *logSink, replicas ...*replica) []sdk.Option {
	addrs := make([]string, len(replicas))
	for i, r := range replicas {
		addrs[i] = r.addr
	}
	return []sdk.Option{
		sdk.WithDialer(sdk.RoundRobin(addrs...)), sdk.WithInsecure(), sdk.WithInstanceID("test-1"),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: logs})),
	}
}

// TestAHandlerWithReviewsKeepsASessionToEveryReplica: with validate
// bindings and RoundRobin over two replicas, Run keeps a session to each,
// listing CAPABILITY_EVERY_REPLICA, and the reviews of both go to the same
// function.
func TestAHandlerWithReviewsKeepsASessionToEveryReplica(t *testing.T) {
	leader := startReplica(t, &fakeBroker{})
	follower := startReplica(t, &fakeBroker{reviewsOnly: true})
	logs := &logSink{}
	reviewed := make(chan string, 2)
	h := sdk.New("secret-policy", replicaOptions(t, logs, leader, follower)...)
	h.OnValidate(secrets, func(_ context.Context, r *sdk.Review) error {
		reviewed <- r.UID
		return nil
	})
	runOn(t, h, leader, follower)
	for i, r := range []*replica{leader, follower} {
		s := r.session(t)
		if !slices.Contains(s.hello.GetCapabilities(), tetherv1.Capability_CAPABILITY_EVERY_REPLICA) {
			t.Errorf("the Hello to replica %d does not list CAPABILITY_EVERY_REPLICA: %v", i, s.hello.GetCapabilities())
		}
		s.deliver(t, review("r"+string(rune('0'+i))))
		if ack := s.ack(t); ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || !ack.GetAdmission().GetAllowed() {
			t.Errorf("the review on replica %d was answered %v", i, ack)
		}
	}
	got := []string{recv(t, reviewed, "a review"), recv(t, reviewed, "a review")}
	slices.Sort(got)
	if !slices.Equal(got, []string{"review-r0", "review-r1"}) {
		t.Errorf("the function reviewed %v, want both replicas' reviews", got)
	}
}

// TestAHandlerWithoutReviewsKeepsOneSession: a handler with lifecycle
// bindings only connects as always, one session through the dialer, and
// does not list CAPABILITY_EVERY_REPLICA.
func TestAHandlerWithoutReviewsKeepsOneSession(t *testing.T) {
	a, b := startReplica(t, &fakeBroker{}), startReplica(t, &fakeBroker{})
	h := sdk.New("cm-watcher", replicaOptions(t, &logSink{}, a, b)...)
	h.OnCreate(configMaps, func(context.Context, *sdk.Event) error { return nil })
	runOn(t, h, a, b)
	s := a.session(t) // RoundRobin's first connection goes to the first address
	if slices.Contains(s.hello.GetCapabilities(), tetherv1.Capability_CAPABILITY_EVERY_REPLICA) {
		t.Errorf("a handler without reviews lists CAPABILITY_EVERY_REPLICA: %v", s.hello.GetCapabilities())
	}
	s.deliver(t, delivery("d1"))
	s.ack(t)
	if n := b.hellos.Load(); n != 0 {
		t.Errorf("the second replica got %d Hellos while the first kept the session", n)
	}
}

// TestAReviewsOnlySessionEndedByItsReplicaLeadingReconnectsAtOnce: when a
// follower comes to lead it ends the reviews-only session with
// Unavailable, and the instance reconnects without its backoff, for the
// full session.
func TestAReviewsOnlySessionEndedByItsReplicaLeadingReconnectsAtOnce(t *testing.T) {
	leader := startReplica(t, &fakeBroker{})
	follower := startReplica(t, &fakeBroker{reviewsOnly: true})
	logs := &logSink{}
	opts := append(replicaOptions(t, logs, leader, follower), sdk.WithReconnectBackoff(time.Hour, time.Hour))
	h := sdk.New("secret-policy", opts...)
	h.OnValidate(secrets, allow)
	runOn(t, h, leader, follower)
	leader.session(t)
	first := follower.session(t)
	follower.reviewsOnly = false // it leads now
	first.end <- status.Error(codes.Unavailable, "this broker replica leads now; reconnect for a full session")
	follower.session(t) // within the test's wait, far below the hour of backoff
}
