package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const (
	daemonLabel = "conformance.tether.dev/daemon"
	daemonName  = "daemon"
	// daemonCleanup is how long the daemon of the handler's spec takes to
	// return once stopped; daemonCancellation its cancellation timeout.
	daemonCleanup      = 500 * time.Millisecond
	daemonCancellation = 10 * time.Second
)

// daemonStart: the daemon runs until stopped, and the kit stops it only
// after the start's ack, so an instance that acks when the function
// returns never acks in time.
func (k *kit) daemonStart(ctx context.Context) error {
	if err := k.createWidget(ctx, daemonName, "daemon", daemonLabel); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, daemonName, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, 1)
	if err != nil {
		return fmt.Errorf("%w: a daemon is acked when it starts, not when it returns", err)
	}
	if got := acks[0].a.GetOutcome(); got != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("daemon start acked %v (%s), want OK", got, acks[0].a.GetMessage())
	}
	return nil
}

// daemonStop deletes the widget: the stop's ack must come once the daemon
// has returned (its cleanup takes daemonCleanup) and before the
// cancellation timeout, and the widget then go.
func (k *kit) daemonStop(ctx context.Context) error {
	if err := k.widgets().Delete(ctx, daemonName, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the widget: %w", err)
	}
	acks, err := k.awaitAcks(ctx, daemonName, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP, 1)
	if err != nil {
		return err
	}
	k.wire.mu.Lock()
	ds, _ := k.wire.exchangesLocked(daemonName, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP)
	k.wire.mu.Unlock()
	took := acks[0].at.Sub(ds[0].at)
	switch {
	case acks[0].a.GetOutcome() != tetherv1.Outcome_OUTCOME_OK:
		return fmt.Errorf("daemon stop acked %v (%s), want OK", acks[0].a.GetOutcome(), acks[0].a.GetMessage())
	case took < daemonCleanup-retryEarlySlack:
		return fmt.Errorf("daemon stop acked %v after it was sent, before the daemon's %v cleanup could end", took, daemonCleanup)
	case took >= daemonCancellation:
		return fmt.Errorf("daemon stop acked %v after it was sent, past the cancellation timeout %v", took, daemonCancellation)
	}
	if err := k.awaitGone(ctx, daemonName); err != nil {
		return err
	}
	list, err := k.client.CoreV1().Events(namespace).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + daemonName})
	if err != nil {
		return fmt.Errorf("listing the widget's Events: %w", err)
	}
	if slices.ContainsFunc(list.Items, func(e corev1.Event) bool { return e.Reason == "DaemonStopTimeout" }) {
		return errors.New("the broker posted DaemonStopTimeout: it stopped waiting for the daemon")
	}
	return nil
}

// exitingName is the widget whose daemon returns by itself (scenario
// exit): the handler must report it with DaemonExited.
const exitingName = "exiting"

// daemonExited creates a widget whose daemon returns at once, without an
// error: its start is acked OK, then a DaemonExited names the binding and
// the widget's UID, not failed, on the same stream; deleted, the widget
// goes.
func (k *kit) daemonExited(ctx context.Context) error {
	if err := k.createWidget(ctx, exitingName, "exit", daemonLabel); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, exitingName, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START, 1)
	if err != nil {
		return err
	}
	if got := acks[0].a.GetOutcome(); got != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("daemon start acked %v (%s), want OK", got, acks[0].a.GetMessage())
	}
	k.wire.mu.Lock()
	ds, _ := k.wire.exchangesLocked(exitingName, tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START)
	uid := ds[0].d.GetRef().GetUid()
	k.wire.mu.Unlock()
	var exit *tetherv1.DaemonExited
	if err := k.wire.awaitErr(ctx, "DaemonExited for widget "+exitingName+"'s daemon, which returned", func() bool {
		exit = daemonExit(k.wire.streams, uid)
		return exit != nil
	}); err != nil {
		return err
	}
	if exit.GetBindingId() != "daemon" || exit.GetFailed() {
		return fmt.Errorf("DaemonExited names the binding %q with failed = %v (%q), want \"daemon\", not failed", exit.GetBindingId(), exit.GetFailed(), exit.GetMessage())
	}
	return k.deleteAndAwaitGone(ctx, exitingName)
}

// daemonExit is the first DaemonExited for the object uid, nil when none
// came; the wire's lock must be held.
func daemonExit(streams []*stream, uid string) *tetherv1.DaemonExited {
	for _, s := range streams {
		for _, e := range s.exits {
			if e.GetUid() == uid {
				return e
			}
		}
	}
	return nil
}
