package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// daemonDelivery builds a DAEMON_START or DAEMON_STOP for binding
// "daemon-0" and the object with the given uid.
func daemonDelivery(kind tetherv1.DeliveryKind, id, uid string, mods ...func(*tetherv1.Delivery)) *tetherv1.Delivery {
	return delivery(id, append([]func(*tetherv1.Delivery){func(d *tetherv1.Delivery) {
		d.Kind, d.BindingId, d.Ref.Uid = kind, "daemon-0", uid
	}}, mods...)...)
}

func daemonStart(id, uid string) *tetherv1.Delivery {
	return daemonDelivery(tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, id, uid)
}

func daemonStop(id, uid string) *tetherv1.Delivery {
	return daemonDelivery(tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP, id, uid)
}

// daemonProbe is a daemon function the test drives: it reports its start,
// waits for its context to end, reports the cause, waits for the gate and
// returns what ret says.
type daemonProbe struct {
	started  chan daemonRun
	causes   chan error
	gate     chan struct{}
	openOnce sync.Once
	ret      func(ctx context.Context) error
	calls    atomic.Int32
	returned atomic.Int32
}

type daemonRun struct {
	ev          *sdk.Event
	hasDeadline bool
	span        trace.SpanContext // the span its ctx carries
}

func newDaemonProbe(ret func(ctx context.Context) error) *daemonProbe {
	if ret == nil {
		ret = func(context.Context) error { return nil }
	}
	return &daemonProbe{
		started: make(chan daemonRun, 16),
		causes:  make(chan error, 16),
		gate:    make(chan struct{}),
		ret:     ret,
	}
}

// open lets stopped daemons return. Tests defer it so that no daemon is
// left blocked when the test ends.
func (p *daemonProbe) open() { p.openOnce.Do(func() { close(p.gate) }) }

func (p *daemonProbe) fn(ctx context.Context, ev *sdk.Event) error {
	p.calls.Add(1)
	_, hasDeadline := ctx.Deadline()
	p.started <- daemonRun{ev: ev, hasDeadline: hasDeadline, span: trace.SpanContextFromContext(ctx)}
	<-ctx.Done()
	p.causes <- context.Cause(ctx)
	<-p.gate
	defer p.returned.Add(1)
	return p.ret(ctx)
}

// wantAck reads the next message, which must be an Ack for id with outcome.
func wantAck(t *testing.T, s *fakeSession, id string, outcome tetherv1.Outcome) *tetherv1.Ack {
	t.Helper()
	ack := s.ack(t)
	if ack.GetDeliveryId() != id || ack.GetOutcome() != outcome {
		t.Fatalf("ack = %v, want %v for %s", ack, outcome, id)
	}
	return ack
}

// startDaemonHandler runs a handler with the probe as daemon binding
// "daemon-0" (and a no-op create binding) and returns its first session.
func startDaemonHandler(t *testing.T, p *daemonProbe, opts ...sdk.Option) (*harness, *fakeSession, func() error) {
	t.Helper()
	hs := newHarness(t, nil)
	h := sdk.New("secret-ttl", hs.options(opts...)...)
	h.OnDaemon(configMaps, p.fn)
	h.OnCreate(configMaps, noop)
	stop := hs.run(h)
	return hs, hs.session(), stop
}

func TestDaemonHelloCarriesDaemonOptions(t *testing.T) {
	checkHelloBindings(t, []bindingCase{{
		name:     "defaults",
		register: func(h *sdk.Handler) { h.OnDaemon(configMaps, noop) },
		want: &tetherv1.Binding{Id: "daemon-0", Kind: tetherv1.BindingKind_BINDING_KIND_DAEMON, Resource: cmResource,
			Daemon: &tetherv1.DaemonOptions{}},
	}, {
		name: "cancellation timeout and restart",
		register: func(h *sdk.Handler) {
			h.OnDaemon(configMaps, noop, sdk.ID("watcher"), sdk.CancellationTimeout(30*time.Second), sdk.Restart(),
				sdk.Namespaces("web"), sdk.Backoff(time.Second, time.Minute))
		},
		want: &tetherv1.Binding{Id: "watcher", Kind: tetherv1.BindingKind_BINDING_KIND_DAEMON, Resource: cmResource,
			Namespaces: []string{"web"}, Backoff: durationpb.New(time.Second), MaxBackoff: durationpb.New(time.Minute),
			Daemon: &tetherv1.DaemonOptions{CancellationTimeout: durationpb.New(30 * time.Second), Restart: true}},
	}})
}

func TestDaemonStartsOnceAndAcksAtOnce(t *testing.T) {
	p := newDaemonProbe(nil)
	defer p.open()
	_, s, _ := startDaemonHandler(t, p)

	// The ack comes while the function runs: it blocks until stopped.
	s.deliver(t, daemonStart("s1", "uid-a"))
	wantAck(t, s, "s1", tetherv1.Outcome_OUTCOME_OK)
	run := recv(t, p.started, "the daemon to start")
	ev := run.ev
	if ev.Kind != sdk.DaemonStart || ev.ID != "s1" || ev.Binding != "daemon-0" || ev.UID != "uid-a" || ev.Object() == nil {
		t.Errorf("event = %v %q %q uid %q object %v", ev.Kind, ev.ID, ev.Binding, ev.UID, ev.Object())
	}
	if run.hasDeadline || !ev.Deadline.IsZero() {
		t.Errorf("daemon context has a deadline (event deadline %s); it must outlive its start delivery", ev.Deadline)
	}

	// Starting it again is acknowledged and changes nothing.
	s.deliver(t, daemonStart("s2", "uid-a"))
	wantAck(t, s, "s2", tetherv1.Outcome_OUTCOME_OK)

	p.open()
	s.deliver(t, daemonStop("x1", "uid-a"))
	if ack := wantAck(t, s, "x1", tetherv1.Outcome_OUTCOME_OK); ack.GetMessage() != "" {
		t.Errorf("stop ack message = %q, want none", ack.GetMessage())
	}
	if n := p.calls.Load(); n != 1 {
		t.Errorf("daemon function ran %d times, want once", n)
	}
}

func TestDaemonsHoldNoWindowSlotButStopsDo(t *testing.T) {
	p := newDaemonProbe(nil)
	defer p.open()
	_, s, _ := startDaemonHandler(t, p, sdk.WithWindow(2))

	for _, uid := range []string{"uid-a", "uid-b", "uid-c"} {
		s.deliver(t, daemonStart("s-"+uid, uid))
		wantAck(t, s, "s-"+uid, tetherv1.Outcome_OUTCOME_OK)
		recv(t, p.started, "a daemon to start")
	}
	s.deliver(t, delivery("d1"))
	wantAck(t, s, "d1", tetherv1.Outcome_OUTCOME_OK)

	// Two stops wait for their daemons, filling the window of 2.
	s.deliver(t, daemonStop("x-a", "uid-a"))
	s.deliver(t, daemonStop("x-b", "uid-b"))
	recv(t, p.causes, "a daemon to be stopped")
	recv(t, p.causes, "a daemon to be stopped")
	s.deliver(t, delivery("d2"))
	if ack := wantAck(t, s, "d2", tetherv1.Outcome_OUTCOME_RETRY); !strings.Contains(ack.GetMessage(), "window of 2 exceeded") {
		t.Errorf("ack message = %q, want the window exceeded", ack.GetMessage())
	}
	p.open()
	got := map[string]bool{}
	for range 2 {
		ack := s.ack(t)
		if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
			t.Fatalf("ack = %v, want OK", ack)
		}
		got[ack.GetDeliveryId()] = true
	}
	if !got["x-a"] || !got["x-b"] {
		t.Errorf("acked %v, want x-a and x-b", got)
	}
	s.deliver(t, delivery("d3"))
	wantAck(t, s, "d3", tetherv1.Outcome_OUTCOME_OK)
}

func TestDaemonStopAcksAfterFunctionReturns(t *testing.T) {
	tests := []struct {
		name    string
		ret     func(ctx context.Context) error
		message string
	}{
		{name: "returns nil", ret: func(context.Context) error { return nil }},
		{name: "returns ctx.Err()", ret: func(ctx context.Context) error { return ctx.Err() }},
		{name: "returns the wrapped cause",
			ret: func(ctx context.Context) error { return fmt.Errorf("watch ended: %w", context.Cause(ctx)) }},
		{name: "returns an error", ret: func(context.Context) error { return errors.New("flush failed") },
			message: "flush failed"},
		{name: "panics", ret: func(context.Context) error { panic("stop bug") }, message: "panic: stop bug"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newDaemonProbe(tt.ret)
			defer p.open()
			_, s, _ := startDaemonHandler(t, p)
			s.deliver(t, daemonStart("s1", "uid-a"))
			wantAck(t, s, "s1", tetherv1.Outcome_OUTCOME_OK)
			recv(t, p.started, "the daemon to start")

			s.deliver(t, daemonStop("x1", "uid-a"))
			if err := recv(t, p.causes, "the daemon to be stopped"); !errors.Is(err, sdk.ErrDaemonStopped) {
				t.Errorf("context cause = %v, want ErrDaemonStopped", err)
			}
			// While the function has not returned, x1 stays unacked: the
			// deliveries sent after it are answered first.
			s.deliver(t, daemonStart("s2", "uid-a"))
			if ack := wantAck(t, s, "s2", tetherv1.Outcome_OUTCOME_RETRY); !strings.Contains(ack.GetMessage(), "still stopping") {
				t.Errorf("start during the stop: message %q, want still stopping", ack.GetMessage())
			}
			s.deliver(t, daemonStop("x2", "uid-not-running"))
			wantAck(t, s, "x2", tetherv1.Outcome_OUTCOME_OK)

			p.open()
			if ack := wantAck(t, s, "x1", tetherv1.Outcome_OUTCOME_OK); ack.GetMessage() != tt.message {
				t.Errorf("stop ack message = %q, want %q", ack.GetMessage(), tt.message)
			}
			if n := p.returned.Load(); n != 1 {
				t.Errorf("function returned %d times before the stop ack, want 1", n)
			}

			// Stopped for good: a new start runs the function again.
			s.deliver(t, daemonStart("s3", "uid-a"))
			wantAck(t, s, "s3", tetherv1.Outcome_OUTCOME_OK)
			recv(t, p.started, "the daemon to start again")
		})
	}
}

func TestDaemonThatReturnsReportsExited(t *testing.T) {
	tests := []struct {
		name    string
		fn      sdk.Func
		failed  bool
		message string
		after   time.Duration // the DaemonExited's retry_after
		log     string
	}{
		{name: "without error", fn: noop},
		{name: "with an error", fn: func(context.Context, *sdk.Event) error { return errors.New("lost the watch") },
			failed: true, message: "lost the watch"},
		{name: "retry after a delay", fn: func(context.Context, *sdk.Event) error {
			return fmt.Errorf("watching: %w", sdk.RetryAfter(errors.New("not yet"), 3*time.Second))
		}, failed: true, message: "watching: not yet", after: 3 * time.Second},
		{name: "retry after the backoff", fn: func(context.Context, *sdk.Event) error {
			return sdk.RetryAfter(errors.New("not yet"), 0)
		}, failed: true, message: "not yet"},
		{name: "panic", fn: func(context.Context, *sdk.Event) error { panic("daemon bug") },
			failed: true, message: "panic: daemon bug", log: "handler function panicked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHarness(t, nil)
			h := sdk.New("secret-ttl", hs.options()...)
			h.OnDaemon(configMaps, tt.fn, sdk.Restart())
			hs.run(h)
			s := hs.session()
			for round, id := range []string{"s1", "s2"} {
				s.deliver(t, daemonStart(id, "uid-a"))
				wantAck(t, s, id, tetherv1.Outcome_OUTCOME_OK)
				m := s.next(t)
				exited := m.GetDaemonExited()
				if exited == nil {
					t.Fatalf("round %d: got %v, want DaemonExited", round, m)
				}
				if exited.GetBindingId() != "daemon-0" || exited.GetUid() != "uid-a" ||
					exited.GetFailed() != tt.failed || exited.GetMessage() != tt.message ||
					exited.GetRetryAfter().AsDuration() != tt.after {
					t.Errorf("round %d: DaemonExited = %v, want failed %v message %q retry_after %v", round, exited,
						tt.failed, tt.message, tt.after)
				}
			}
			if tt.log != "" {
				hs.logs.waitFor(t, tt.log)
				if !strings.Contains(hs.logs.String(), "goroutine") {
					t.Error("the panic was logged without its stack")
				}
			}
			// An exited daemon is no longer running: its stop is acked at once.
			s.deliver(t, daemonStop("x1", "uid-a"))
			wantAck(t, s, "x1", tetherv1.Outcome_OUTCOME_OK)
		})
	}
}

// TestADaemonsRunSendsItsPatchesWithItsExit: what a daemon's function left
// on its event goes with its exit report, failed or not, as an ack carries
// a function's; Kubernetes Events are ignored, and a stopped daemon's
// patches are not sent.
func TestADaemonsRunSendsItsPatchesWithItsExit(t *testing.T) {
	for _, tt := range []struct {
		name   string
		err    error
		failed bool
	}{
		{name: "returned", err: nil},
		{name: "failed", err: sdk.RetryAfter(errors.New("not yet"), time.Second), failed: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			hs := newHarness(t, nil)
			h := sdk.New("secret-ttl", hs.options()...)
			h.OnDaemon(configMaps, func(_ context.Context, ev *sdk.Event) error {
				ev.SetLabel("a", "b")
				ev.PatchStatus(map[string]any{"phase": "Watching"})
				ev.SetResult("r")
				ev.Record(sdk.Normal, "Watching", "started")
				return tt.err
			})
			hs.run(h)
			s := hs.session()
			s.deliver(t, daemonStart("s1", "uid-a"))
			if ack := wantAck(t, s, "s1", tetherv1.Outcome_OUTCOME_OK); ack.Patch != nil || ack.StatusPatch != nil || ack.Result != nil {
				t.Errorf("start ack = %v, want a bare OK", ack)
			}
			exited := s.next(t).GetDaemonExited()
			if exited == nil || exited.GetFailed() != tt.failed {
				t.Fatalf("got %v, want DaemonExited with failed %v", exited, tt.failed)
			}
			if string(exited.GetPatch()) != `{"metadata":{"labels":{"a":"b"}}}` || string(exited.GetStatusPatch()) != `{"phase":"Watching"}` ||
				string(exited.GetResult()) != `"r"` {
				t.Errorf("DaemonExited carries patch %s, status patch %s, result %s", exited.GetPatch(), exited.GetStatusPatch(), exited.GetResult())
			}
			hs.logs.waitFor(t, "ignoring Kubernetes Events recorded by a daemon")
		})
	}
}

func TestSessionEndStopsDaemons(t *testing.T) {
	tests := []struct {
		name string
		end  func(hs *harness, s *fakeSession)
	}{
		{name: "broker restart", end: func(hs *harness, _ *fakeSession) { hs.restart() }},
		{name: "stream broken", end: func(_ *harness, s *fakeSession) { s.end <- status.Error(codes.Unavailable, "broker is moving") }},
		{name: "broker closes the stream", end: func(_ *harness, s *fakeSession) { s.end <- nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newDaemonProbe(nil)
			defer p.open()
			hs, first, _ := startDaemonHandler(t, p)
			first.deliver(t, daemonStart("s1", "uid-a"))
			wantAck(t, first, "s1", tetherv1.Outcome_OUTCOME_OK)
			recv(t, p.started, "the daemon to start")

			tt.end(hs, first)
			if err := recv(t, p.causes, "the daemon to be stopped"); !errors.Is(err, sdk.ErrSessionEnded) {
				t.Errorf("context cause = %v, want ErrSessionEnded", err)
			}
			// The handler waits for the daemon before it reconnects.
			hs.logs.waitFor(t, "session ended: waiting for daemons to stop")
			if strings.Contains(hs.logs.String(), "reconnecting") {
				t.Fatal("reconnecting while the daemon still runs")
			}
			p.open()
			second := hs.session()
			if n := p.returned.Load(); n != 1 {
				t.Fatalf("new session while %d of 1 daemons returned", n)
			}
			// The broker starts the daemon again; the old one is not
			// reported as exited.
			second.deliver(t, daemonStart("s2", "uid-a"))
			wantAck(t, second, "s2", tetherv1.Outcome_OUTCOME_OK)
			recv(t, p.started, "the daemon to start again")
		})
	}
}

func TestSessionEndLeavesStuckDaemonsBehindAfterTheDrainTimeout(t *testing.T) {
	p := newDaemonProbe(nil)
	defer p.open()
	hs, first, _ := startDaemonHandler(t, p, sdk.WithDrainTimeout(20*time.Millisecond))
	first.deliver(t, daemonStart("s1", "uid-a"))
	wantAck(t, first, "s1", tetherv1.Outcome_OUTCOME_OK)
	recv(t, p.started, "the daemon to start")

	hs.restart()
	recv(t, p.causes, "the daemon to be stopped")
	second := hs.session() // the daemon still blocks on the gate
	if !strings.Contains(hs.logs.String(), "daemon did not return within the drain timeout") {
		t.Error("the daemon left behind was not logged")
	}
	second.deliver(t, delivery("d1"))
	wantAck(t, second, "d1", tetherv1.Outcome_OUTCOME_OK)
}

func TestGracefulStopStopsDaemonsBeforeGoodbye(t *testing.T) {
	p := newDaemonProbe(nil)
	defer p.open()
	hs, s, stop := startDaemonHandler(t, p)
	s.deliver(t, daemonStart("s1", "uid-a"))
	wantAck(t, s, "s1", tetherv1.Outcome_OUTCOME_OK)
	recv(t, p.started, "the daemon to start")

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	if err := recv(t, p.causes, "the daemon to be stopped"); !errors.Is(err, sdk.ErrShuttingDown) {
		t.Errorf("context cause = %v, want ErrShuttingDown", err)
	}
	hs.logs.waitFor(t, "stopping: draining")
	// No new daemons while stopping.
	s.deliver(t, daemonStart("s2", "uid-b"))
	if ack := wantAck(t, s, "s2", tetherv1.Outcome_OUTCOME_RETRY); ack.GetMessage() != "handler shutting down" {
		t.Errorf("start while stopping: message %q, want handler shutting down", ack.GetMessage())
	}
	p.open()
	if m := s.next(t); m.GetGoodbye() == nil {
		t.Fatalf("after the daemon stopped got %v, want Goodbye (and no DaemonExited)", m)
	}
	if n := p.returned.Load(); n != 1 {
		t.Errorf("Goodbye sent while %d of 1 daemons returned", n)
	}
	closedWithin(t, s.closed, "the handler to close its side of the stream")
	if err := recv(t, stopped, "Run to return"); err != nil {
		t.Errorf("Run() = %v after a graceful stop, want nil", err)
	}
}

func TestDrainTimeoutLeavesStuckDaemonsBehind(t *testing.T) {
	p := newDaemonProbe(nil)
	defer p.open()
	hs, s, stop := startDaemonHandler(t, p, sdk.WithDrainTimeout(20*time.Millisecond))
	s.deliver(t, daemonStart("s1", "uid-a"))
	wantAck(t, s, "s1", tetherv1.Outcome_OUTCOME_OK)
	recv(t, p.started, "the daemon to start")
	s.deliver(t, daemonStop("x1", "uid-a"))
	recv(t, p.causes, "the daemon to be stopped")

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// The stop waiting for the stuck daemon is handed back, then goodbye.
	if ack := wantAck(t, s, "x1", tetherv1.Outcome_OUTCOME_RETRY); ack.GetMessage() != "handler shutting down" {
		t.Errorf("stop ack message = %q, want handler shutting down", ack.GetMessage())
	}
	if m := s.next(t); m.GetGoodbye() == nil {
		t.Fatalf("got %v, want Goodbye", m)
	}
	if err := recv(t, stopped, "Run to return"); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	if !strings.Contains(hs.logs.String(), "drain timeout: daemon has not returned") {
		t.Error("the stuck daemon was not logged")
	}
}
