package sdk_test

import (
	"context"
	"crypto/tls"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// killable is a replica whose process can be killed: its server stops and
// its port refuses connections.
type killable struct {
	*replica
	srv *grpc.Server
}

func startKillable(t *testing.T, b *fakeBroker) *killable {
	t.Helper()
	r, srv := serveReplica(t, "127.0.0.1:0", b)
	return &killable{replica: r, srv: srv}
}

// kill stops the server at once: its streams end, and its port refuses.
func (k *killable) kill() { k.srv.Stop() }

// TestTheFollowerComingToLeadGetsAFullSessionWhileTheLeaderIsDead: the
// leader's process killed (its port refusing), the follower comes to lead
// and ends the reviews-only session; the instance is back on it, for a full
// session, within the reconnect backoff's cap, even if the new leader
// refuses the first Hellos while it starts.
func TestTheFollowerComingToLeadGetsAFullSessionWhileTheLeaderIsDead(t *testing.T) {
	leader := startKillable(t, &fakeBroker{})
	var leading atomic.Bool
	var refusals atomic.Int32
	follower := startReplica(t, &fakeBroker{})
	follower.admit = func(_ context.Context, _ int, _ *tetherv1.Hello) error {
		if leading.Load() && refusals.Add(1) <= 3 {
			return status.Error(codes.Unavailable, "attaching handler: not now; retry: the broker is starting")
		}
		return nil
	}
	follower.reviewsOnly = true
	first := validatorOn(t, leader.replica, follower)
	leader.kill()
	follower.reviewsOnly = false
	leading.Store(true)
	ended := time.Now()
	first.end <- status.Error(codes.Unavailable, "this broker replica leads now; reconnect for a full session")
	s := follower.session(t)
	took := time.Since(ended)
	t.Logf("a full session on the new leader %s after it ended the reviews-only one, %d Hellos refused", took.Round(time.Millisecond), refusals.Load()-1)
	if s.hello.GetInstanceId() != "test-1" {
		t.Errorf("instance %q", s.hello.GetInstanceId())
	}
	if limit := 4 * sdk.DefaultReconnectMax; took > limit { // three refusals, at most the cap after each
		t.Errorf("the new leader had the instance back %s after, more than %s", took, limit)
	}
}

// restart serves b again on the killed replica's address, as the kubelet
// restarting the container: the same IP and port.
func (k *killable) restart(t *testing.T, b *fakeBroker) {
	t.Helper()
	k.replica, k.srv = serveReplica(t, k.addr, b)
}

// TestTheKilledLeaderBackAsAFollowerAndTheNewLeaderBothGetSessions: the
// whole failover of a killed leader, A and B: A refuses, B leads and ends
// its reviews-only session, A comes back (same address) as a follower;
// the instance has a full session on B and a reviews-only one on A.
func TestTheKilledLeaderBackAsAFollowerAndTheNewLeaderBothGetSessions(t *testing.T) {
	a := startKillable(t, &fakeBroker{})
	b := startReplica(t, &fakeBroker{reviewsOnly: true})
	first := validatorOn(t, a.replica, b)
	a.kill()
	b.reviewsOnly = false
	start := time.Now()
	first.end <- status.Error(codes.Unavailable, "this broker replica leads now; reconnect for a full session")
	b.session(t)
	t.Logf("full session on the new leader after %s", time.Since(start).Round(time.Millisecond))
	a.restart(t, &fakeBroker{reviewsOnly: true})
	a.session(t)
	t.Logf("reviews-only session on the restarted replica after %s", time.Since(start).Round(time.Millisecond))
}

// TestASessionToALookedUpReplicaDoesNotResolveTheNameAgain: a handler
// dialling a DNS name keeps a session to each address the name had when it
// looked, dialling that address; the session must not depend on the name
// resolving again, in gRPC's own resolver, at every reconnection. Else one
// moment of the name not resolving (or resolving slowly: gRPC waits up to
// 30 s, and asks for TXT records too) leaves the instance without a
// session to any replica, though it knows them all and they all answer.
// TLS still verifies the name (it is the stream's :authority).
func TestASessionToALookedUpReplicaDoesNotResolveTheNameAgain(t *testing.T) {
	leader := startReplica(t, &fakeBroker{})
	follower := startReplica(t, &fakeBroker{reviewsOnly: true})
	const name = "tether-broker-replicas.tether-system.svc.invalid" // nothing resolves it
	lookups := make(chan string, 64)
	logs := logsOnFailure(t)
	h := sdk.New("secret-policy", sdk.WithInsecure(), sdk.WithInstanceID("test-1"),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: logs})),
		sdk.WithLookup(func(_ context.Context, host, port string) ([]string, error) {
			select {
			case lookups <- host:
			default:
			}
			return []string{leader.addr, follower.addr}, nil
		}))
	h.OnValidate(secrets, allow)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h.Run(ctx, name+":7443") }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-errc:
		case <-time.After(wait):
			t.Errorf("Run did not return within %s of cancellation", wait)
		}
	})
	if got := recv(t, lookups, "a lookup of the name"); got != name {
		t.Errorf("looked up %q, want %q", got, name)
	}
	for _, r := range []*replica{leader, follower} {
		s := r.session(t)
		if got := s.md.Get(":authority"); len(got) != 1 || got[0] != name+":7443" {
			t.Errorf("the session on %s has :authority %v, want the name the handler dials, %s:7443", r.addr, got, name)
		}
	}
}

// TestASessionToALookedUpReplicaVerifiesTheNameOverTLS: dialled by its
// address, a replica is still verified by TLS as the name the handler was
// given, which its certificate holds (not its address).
func TestASessionToALookedUpReplicaVerifiesTheNameOverTLS(t *testing.T) {
	const name = "tether-broker-replicas.tether-system.svc.invalid"
	pki := newTestPKI(t, name)
	server, roots := pki.server, pki.client.RootCAs
	leader, _ := serveReplica(t, "127.0.0.1:0", &fakeBroker{}, grpc.Creds(credentials.NewTLS(server)))
	follower, _ := serveReplica(t, "127.0.0.1:0", &fakeBroker{reviewsOnly: true}, grpc.Creds(credentials.NewTLS(server)))
	h := sdk.New("secret-policy", sdk.WithInstanceID("test-1"), sdk.WithToken("t0"),
		sdk.WithTLS(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}), // no ServerName: the name dialled
		sdk.WithLogger(hclog.NewNullLogger()),
		sdk.WithLookup(func(context.Context, string, string) ([]string, error) {
			return []string{leader.addr, follower.addr}, nil
		}))
	h.OnValidate(secrets, allow)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h.Run(ctx, "dns:///"+name+":7443") }()
	t.Cleanup(func() {
		cancel()
		<-errc
	})
	leader.session(t)
	follower.session(t)
}

// validatorOn runs a handler with a validate binding on the leader and the
// follower, its log shown if the test fails, and returns its first session
// to the follower, once it has one to each.
func validatorOn(t *testing.T, leader, follower *replica) *fakeSession {
	t.Helper()
	h := sdk.New("secret-policy", replicaOptions(t, logsOnFailure(t), leader, follower)...)
	h.OnValidate(secrets, allow)
	runOn(t, h, leader, follower)
	leader.session(t)
	return follower.session(t)
}
