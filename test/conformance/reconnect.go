package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// rejectMessage is what the proxy says when it refuses the Hello, as the
// broker names a misconfigured binding.
const rejectMessage = "conformance: binding create: refused on purpose"

// reconnect restarts the broker: the handler must connect again, be
// welcomed, and handle a new widget's create.
func (k *kit) reconnect(ctx context.Context) error {
	k.wire.mu.Lock()
	before := len(k.wire.streams)
	k.wire.mu.Unlock()
	if err := k.restartBroker(ctx, "broker-restarted.log"); err != nil {
		return fmt.Errorf("restarting the broker: %w", err)
	}
	if !k.wire.await(ctx, waitFor, func() bool {
		for _, s := range k.wire.streams[before:] {
			if s.welcome != nil && !s.ended {
				return true
			}
		}
		return false
	}) {
		return fmt.Errorf("no stream welcomed by the restarted broker within %v", waitFor)
	}
	const name = "reconnected"
	if err := k.createWidget(ctx, name, "ok"); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, name, tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, 1)
	if err != nil {
		return err
	}
	if got := acks[0].a.GetOutcome(); got != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("create acked %v (%s), want OK", got, acks[0].a.GetMessage())
	}
	return k.awaitResult(ctx, name, map[string]any{"scenario": "ok"})
}

// connNew: every session so far (the first, the one after the broker's
// restart, the one after the proxy ended a session) came on a connection of
// its own, which the proxy tells by the handler's address.
func (k *kit) connNew(ctx context.Context) error {
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	if len(k.wire.streams) < 2 {
		return errors.New("the handler had one session only: nothing to judge")
	}
	first := map[string]int{} // address: the first session on it
	for i, s := range k.wire.streams {
		if j, ok := first[s.peer]; ok {
			return fmt.Errorf("session %d came on the connection of session %d (%s): each session needs a new one", i+1, j+1, s.peer)
		}
		first[s.peer] = i
	}
	return nil
}

// rejectedHello starts the handler again with the proxy refusing every
// Hello with InvalidArgument, a permanent status: it must say why and exit
// with a status other than 0, without trying again.
func (k *kit) rejectedHello(ctx context.Context) error {
	k.killHandler() // the one before, if the drain left it running
	k.wire.mu.Lock()
	k.wire.reject = status.New(codes.InvalidArgument, rejectMessage)
	before := len(k.wire.streams)
	k.relaunched = before
	k.wire.mu.Unlock()
	if err := k.startHandler("handler-rejected.log"); err != nil {
		return err
	}
	attempts := func() int {
		k.wire.mu.Lock()
		defer k.wire.mu.Unlock()
		return len(k.wire.streams) - before
	}
	select {
	case <-k.done:
	case <-time.After(waitFor):
		return fmt.Errorf("the handler still runs %v after its Hello was refused, having connected %d times", waitFor, attempts())
	case <-ctx.Done():
		return ctx.Err()
	}
	switch n := attempts(); {
	case k.exitErr == nil:
		return errors.New("the handler exited with status 0 after its Hello was refused")
	case n != 1:
		return fmt.Errorf("the handler connected %d times, want once: a refused Hello is not retried", n)
	}
	out, err := os.ReadFile(filepath.Join(k.opts.dir, "handler-rejected.log"))
	if err != nil {
		return fmt.Errorf("reading the handler's output: %w", err)
	}
	if !strings.Contains(string(out), rejectMessage) {
		return fmt.Errorf("the handler's output does not give the broker's message %q", rejectMessage)
	}
	return nil
}
