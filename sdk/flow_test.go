package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

// gauge counts functions running at once and remembers the peak.
type gauge struct {
	mu        sync.Mutex
	now, peak int
}

func (g *gauge) enter() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now++
	g.peak = max(g.peak, g.now)
}

func (g *gauge) leave() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.now--
}

func (g *gauge) max() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.peak
}

func TestWindowIsNeverExceeded(t *testing.T) {
	const window, total = 4, 50

	t.Run("broker floods the handler", func(t *testing.T) {
		hs := newHarness(t, nil)
		var g gauge
		started := make(chan string, total)
		gate := make(chan struct{})
		h := sdk.New("secret-ttl", hs.options(sdk.WithWindow(window))...)
		h.OnCreate(configMaps, func(ctx context.Context, ev *sdk.Event) error {
			g.enter()
			defer g.leave()
			started <- ev.ID
			<-gate
			return nil
		})
		hs.run(h)
		s := hs.session()
		for i := range total {
			s.deliver(t, delivery(fmt.Sprint("d", i)))
		}
		acked := map[string]bool{}
		for range total - window {
			ack := s.ack(t)
			if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY || !strings.Contains(ack.GetMessage(), "window of 4 exceeded") {
				t.Fatalf("ack = %v, want RETRY for exceeding the window", ack)
			}
			acked[ack.GetDeliveryId()] = true
		}
		running := map[string]bool{}
		for range window {
			running[recv(t, started, "a function to start")] = true
		}
		close(gate)
		for range window {
			ack := s.ack(t)
			if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || !running[ack.GetDeliveryId()] || acked[ack.GetDeliveryId()] {
				t.Fatalf("ack = %v, want OK for one of the running %v", ack, running)
			}
			acked[ack.GetDeliveryId()] = true
		}
		if len(acked) != total {
			t.Errorf("%d distinct deliveries acked, want %d", len(acked), total)
		}
		if p := g.max(); p > window {
			t.Errorf("peak concurrency %d exceeds window %d", p, window)
		}
	})

	t.Run("broker honours the window", func(t *testing.T) {
		hs := newHarness(t, nil)
		var g gauge
		started := make(chan struct{}, total)
		proceed := make(chan struct{})
		h := sdk.New("secret-ttl", hs.options(sdk.WithWindow(window))...)
		h.OnCreate(configMaps, func(ctx context.Context, ev *sdk.Event) error {
			g.enter()
			defer g.leave()
			started <- struct{}{}
			select {
			case <-proceed:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
		hs.run(h)
		s := hs.session()
		if w := s.hello.GetWindow(); w != window {
			t.Fatalf("hello window = %d, want %d", w, window)
		}
		sent, running := 0, 0
		for ; sent < window; sent++ {
			s.deliver(t, delivery(fmt.Sprint("d", sent)))
		}
		for acked := 0; acked < total; acked++ {
			for ; running < min(window, total-acked); running++ {
				recv(t, started, "a function to start")
			}
			select {
			case proceed <- struct{}{}:
			case <-time.After(wait):
				t.Fatal("no function took the go-ahead")
			}
			running--
			if ack := s.ack(t); ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
				t.Fatalf("ack = %v, want OK", ack)
			}
			if sent < total {
				s.deliver(t, delivery(fmt.Sprint("d", sent)))
				sent++
			}
		}
		if p := g.max(); p != window {
			t.Errorf("peak concurrency %d, want exactly the window %d", p, window)
		}
	})
}

func TestWelcomeWindowCapsTheHandlerWindow(t *testing.T) {
	hs := newHarness(t, &fakeBroker{window: 1})
	gate := make(chan struct{})
	h := sdk.New("secret-ttl", hs.options(sdk.WithWindow(8))...)
	h.OnCreate(configMaps, func(context.Context, *sdk.Event) error { <-gate; return nil })
	hs.run(h)
	s := hs.session()
	s.deliver(t, delivery("d1"))
	s.deliver(t, delivery("d2"))
	if ack := s.ack(t); ack.GetDeliveryId() != "d2" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY {
		t.Fatalf("ack = %v, want d2 RETRY beyond the broker's window of 1", ack)
	}
	close(gate)
	if ack := s.ack(t); ack.GetDeliveryId() != "d1" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
		t.Fatalf("ack = %v, want d1 OK", ack)
	}
}

func TestCancelEndsTheFunctionContext(t *testing.T) {
	hs := newHarness(t, nil)
	started := make(chan struct{})
	cause := make(chan error, 1)
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, func(ctx context.Context, ev *sdk.Event) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	hs.run(h)
	s := hs.session()
	s.deliver(t, delivery("d1"))
	closedWithin(t, started, "the function to start")
	s.cancel(t, "d1", "object deleted")

	if err := recv(t, cause, "the function to see the cancellation"); !errors.Is(err, sdk.ErrCancelled) || !strings.Contains(err.Error(), "object deleted") {
		t.Errorf("context cause = %v, want ErrCancelled with the reason", err)
	}
	ack := s.ack(t)
	if ack.GetDeliveryId() != "d1" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY || ack.GetMessage() != "context canceled" {
		t.Errorf("ack = %v, want one RETRY ack for d1", ack)
	}
}

func TestGracefulStopSaysGoodbyeThenFinishesInFlightWork(t *testing.T) {
	hs := newHarness(t, nil)
	started := make(chan struct{})
	release := make(chan struct{})
	h := sdk.New("secret-ttl", hs.options()...)
	h.OnCreate(configMaps, func(ctx context.Context, ev *sdk.Event) error {
		if ev.ID == "d1" {
			close(started)
			<-release
		}
		ev.SetLabel("done", "yes")
		return nil
	})
	stop := hs.run(h)
	s := hs.session()
	s.deliver(t, delivery("d1"))
	closedWithin(t, started, "the function to start")

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	// Goodbye at once, so that the broker sends nothing new.
	s.goodbye(t)

	// Work sent before the broker read the Goodbye is handed back at once.
	s.deliver(t, delivery("d2"))
	if ack := s.ack(t); ack.GetDeliveryId() != "d2" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY || ack.GetMessage() != "handler shutting down" {
		t.Fatalf("ack = %v, want d2 RETRY: handler shutting down", ack)
	}
	select {
	case <-s.closed:
		t.Fatal("the stream was closed with work still in flight")
	default:
	}
	close(release)
	if ack := s.ack(t); ack.GetDeliveryId() != "d1" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || len(ack.GetPatch()) == 0 {
		t.Fatalf("ack = %v, want d1 OK with its patch", ack)
	}
	closedWithin(t, s.closed, "the handler to close its side of the stream")
	if err := recv(t, stopped, "Run to return"); err != nil {
		t.Errorf("Run() = %v after a graceful stop, want nil", err)
	}
}

func TestDrainTimeoutCancelsAndRetriesWhatIsLeft(t *testing.T) {
	hs := newHarness(t, nil)
	started := make(chan struct{})
	cause := make(chan error, 1)
	h := sdk.New("secret-ttl", hs.options(sdk.WithDrainTimeout(20*time.Millisecond))...)
	h.OnCreate(configMaps, func(ctx context.Context, ev *sdk.Event) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return nil // ignored: the drain timeout already acked it
	})
	stop := hs.run(h)
	s := hs.session()
	s.deliver(t, delivery("d1"))
	closedWithin(t, started, "the function to start")

	stopped := make(chan error, 1)
	go func() { stopped <- stop() }()
	s.goodbye(t)
	if ack := s.ack(t); ack.GetDeliveryId() != "d1" || ack.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY || ack.GetMessage() != "handler shutting down" {
		t.Fatalf("ack = %v, want d1 RETRY: handler shutting down", ack)
	}
	if err := recv(t, cause, "the function to be cancelled"); !errors.Is(err, sdk.ErrShuttingDown) {
		t.Errorf("context cause = %v, want ErrShuttingDown", err)
	}
	closedWithin(t, s.closed, "the handler to close its side of the stream")
	if err := recv(t, stopped, "Run to return"); err != nil {
		t.Errorf("Run() = %v, want nil", err)
	}
	select {
	case m := <-s.fromSDK:
		t.Errorf("message after the stream was closed: %v", m)
	default:
	}
}
