package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// drainingName is the widget whose create (scenario held) the handler
// holds when the kit stops it, so that its stream stays open past its
// Goodbye until the kit releases it.
const drainingName = "draining"

// handback is the delivery the kit sends after the handler's Goodbye
// (drain.handback), and the stream it went on.
type handback struct {
	s  *stream
	id string
	// err is why it could not be sent.
	err error
}

// drain creates a widget whose create the handler holds until the kit
// releases it and, once the handler runs that create, sends it SIGTERM.
// When its Goodbye reaches the proxy, the kit sends it a made-up delivery,
// as one crossing the Goodbye (drain.handback), and releases the create
// once that delivery is acked. The handler must say Goodbye, the broker end
// the stream with OK, and the process exit with status 0.
func (k *kit) drain(ctx context.Context) error {
	if err := k.createWidget(ctx, drainingName, "held"); err != nil {
		return err
	}
	// Released on every way out, so that the handler never waits on it.
	defer k.release(drainingName)
	var s *stream
	if err := k.wire.awaitErr(ctx, "create of widget "+drainingName+" sent", func() bool {
		s = k.wire.liveStreamLocked()
		return s != nil && slices.ContainsFunc(s.deliveries, func(d delivery) bool { return d.d.GetRef().GetName() == drainingName })
	}); err != nil {
		return err
	}
	// The handler takes its stream's messages in order: once it answered
	// one sent after the create, the create runs, and the handler holds it
	// until the kit releases it.
	sync := madeUpCreate(undeclaredBinding, "drain-sync", "ok", nil)
	if err := k.wire.inject(s, sync); err != nil {
		return err
	}
	if _, err := k.awaitAckOf(ctx, s, sync.GetDelivery().GetId()); err != nil {
		return err
	}
	sent := make(chan handback, 1)
	k.wire.mu.Lock()
	k.wire.onGoodbye = func(s *stream) {
		msg := madeUpCreate("create", "handed-back", "ok", nil)
		sent <- handback{s: s, id: msg.GetDelivery().GetId(), err: k.wire.inject(s, msg)}
	}
	k.wire.mu.Unlock()
	if err := k.handler.Process.Signal(syscall.SIGTERM); err != nil {
		return fmt.Errorf("signalling the handler: %w", err)
	}
	select {
	case hb := <-sent:
		k.handback = &hb
		if hb.err == nil {
			// Judged by drainHandback; the create is released either way.
			k.wire.await(ctx, waitFor, func() bool { return hb.s.acks[hb.id].a != nil || hb.s.ended })
		}
	case <-time.After(waitFor):
		return fmt.Errorf("no Goodbye reached the proxy within %v of SIGTERM", waitFor)
	}
	if err := k.release(drainingName); err != nil {
		return err
	}
	var last *stream
	if !k.wire.await(ctx, waitFor, func() bool {
		last = k.wire.streams[len(k.wire.streams)-1]
		return last.ended
	}) {
		return errors.New("the stream did not end after SIGTERM")
	}
	k.wire.mu.Lock()
	goodbye, end := last.goodbye, last.endStatus
	k.wire.mu.Unlock()
	if goodbye.IsZero() {
		return errors.New("the stream ended without a Goodbye")
	}
	if end.Code() != 0 {
		return fmt.Errorf("the broker ended the stream with %s (%s), not OK", end.Code(), end.Message())
	}
	select {
	case <-k.done:
	case <-time.After(waitFor):
		return fmt.Errorf("the handler did not exit within %v of SIGTERM", waitFor)
	}
	if k.exitErr != nil {
		return fmt.Errorf("the handler exited with %v, want status 0", k.exitErr)
	}
	return nil
}

// drainHandback judges the ack of the delivery the kit sent after the
// handler's Goodbye: RETRY, which hands it back.
func (k *kit) drainHandback(ctx context.Context) error {
	hb := k.handback
	if hb == nil {
		return errors.New("no Goodbye reached the kit, which sends a delivery after it: nothing to judge")
	}
	if hb.err != nil {
		return hb.err
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	a := hb.s.acks[hb.id].a
	switch {
	case a == nil:
		return errors.New("the delivery sent after the Goodbye was not acked before the stream ended")
	case a.GetOutcome() != tetherv1.Outcome_OUTCOME_RETRY:
		return fmt.Errorf("the delivery sent after the Goodbye was acked %v (%q), want RETRY", a.GetOutcome(), a.GetMessage())
	}
	return nil
}

// release lets the handler's create of widget name (scenario held) return:
// the file it waits for, in the folder the kit gives it. Releasing twice
// is harmless.
func (k *kit) release(name string) error {
	path := filepath.Join(k.handlerDir(), "release-"+name)
	if err := os.WriteFile(path, nil, 0o644); err != nil {
		return fmt.Errorf("releasing the create of widget %s: %w", name, err)
	}
	return nil
}
