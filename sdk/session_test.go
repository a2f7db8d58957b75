package sdk_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

func TestRejectedHelloEndsRunWithTheBrokersMessage(t *testing.T) {
	tests := []struct {
		code    codes.Code
		message string
	}{
		{codes.InvalidArgument, "bindings[0] (create-0): when: undeclared reference to 'objekt'"},
		{codes.PermissionDenied, "bindings[1] (delete-0): system:serviceaccount:x:y cannot watch secrets in namespace kube-system"},
		{codes.Unauthenticated, "token: TokenReview rejected the token"},
		{codes.FailedPrecondition, "bindings[0] (create-0): resource: no resource widgets in example.com/v1"},
		{codes.Unimplemented, "protocol_version: v2 is not supported"},
	}
	for _, tt := range tests {
		t.Run(tt.code.String(), func(t *testing.T) {
			hs := newHarness(t, &fakeBroker{admit: func(context.Context, int, *tetherv1.Hello) error {
				return status.Error(tt.code, tt.message)
			}})
			h := sdk.New("secret-ttl", hs.options()...)
			h.OnCreate(configMaps, noop)

			err := recv(t, hs.runErr(context.Background(), h), "Run to return")
			var rej *sdk.RejectedError
			if !errors.As(err, &rej) {
				t.Fatalf("Run() = %v, want a *RejectedError", err)
			}
			if rej.Code != tt.code.String() || rej.Message != tt.message || rej.Handler != "secret-ttl" {
				t.Errorf("rejection = %+v, want code %s message %q", rej, tt.code, tt.message)
			}
			if !strings.Contains(err.Error(), tt.message) {
				t.Errorf("error %q does not carry the broker's message", err)
			}
			if status.Code(err) != tt.code {
				t.Errorf("status.Code(err) = %s, want %s", status.Code(err), tt.code)
			}
			if n := hs.broker.hellos.Load(); n != 1 {
				t.Errorf("broker saw %d Hellos, want 1: a rejection is not retried", n)
			}
		})
	}
}

func TestUnavailableBrokerIsRetried(t *testing.T) {
	hs := newHarness(t, &fakeBroker{admit: func(_ context.Context, n int, _ *tetherv1.Hello) error {
		if n <= 2 {
			return status.Error(codes.Unavailable, "not the leader")
		}
		return nil
	}})
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, noop)
	hs.run(h)
	s := hs.session()
	if n := hs.broker.hellos.Load(); n != 3 {
		t.Errorf("welcomed on Hello %d, want 3", n)
	}
	s.deliver(t, delivery("d1"))
	if ack := s.ack(t); ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Errorf("ack = %v, want OK", ack)
	}
}

func TestReconnectsAfterBrokerRestartAndCancelsOrphanedWork(t *testing.T) {
	hs := newHarness(t, nil)
	started := make(chan struct{}, 1)
	cause := make(chan error, 1)
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, func(ctx context.Context, ev *sdk.Event) error {
		if ev.ID == "old" {
			started <- struct{}{}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		}
		return nil
	})
	hs.run(h)
	first := hs.session()
	first.deliver(t, delivery("old"))
	recv(t, started, "the function to start")

	hs.restart()
	if err := recv(t, cause, "the orphaned function to be cancelled"); !errors.Is(err, sdk.ErrSessionEnded) {
		t.Errorf("context cause = %v, want ErrSessionEnded", err)
	}
	second := hs.session()
	if second.hello.GetInstanceId() != first.hello.GetInstanceId() || len(second.hello.GetBindings()) != 1 {
		t.Errorf("second Hello = %v, want the same instance and bindings", second.hello)
	}
	second.deliver(t, delivery("new"))
	if ack := second.ack(t); ack.GetDeliveryId() != "new" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Errorf("ack = %v, want OK for the delivery on the new session", ack)
	}
}

func TestBrokerClosingTheStreamIsRetried(t *testing.T) {
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, noop)
	hs.run(h)
	hs.session().end <- nil
	s := hs.session()
	s.deliver(t, delivery("d1"))
	if ack := s.ack(t); ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Errorf("ack = %v, want OK", ack)
	}
	hs.logs.waitFor(t, "broker closed the stream")
}

func TestStopBeforeWelcomeReturnsNil(t *testing.T) {
	helloSeen := make(chan struct{})
	hs := newHarness(t, &fakeBroker{admit: func(ctx context.Context, _ int, _ *tetherv1.Hello) error {
		close(helloSeen)
		<-ctx.Done() // never welcomes
		return ctx.Err()
	}})
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, noop)
	stop := hs.run(h)
	closedWithin(t, helloSeen, "the Hello")
	if err := stop(); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func TestStopWhileBrokerIsDownReturnsNil(t *testing.T) {
	hs := newHarness(t, nil)
	hs.stop()
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, noop)
	stop := hs.run(h)
	hs.logs.waitFor(t, "reconnecting")
	if err := stop(); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
}

func TestRunIsNotReentrant(t *testing.T) {
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, noop)
	hs.run(h)
	hs.session()
	err := recv(t, hs.runErr(context.Background(), h), "the second Run to return")
	if err == nil || !strings.Contains(err.Error(), "already running") {
		t.Fatalf("second Run() = %v, want an already-running error", err)
	}
}
