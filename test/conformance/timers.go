package main

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const (
	timerLabel = "conformance.tether.dev/timer"
	// tickInterval is the tick binding's interval in the handler's spec.
	tickInterval = 500 * time.Millisecond
	tickingName  = "ticking"
)

// timerTicks waits for three ticks of the ticking widget: each acked, and
// each after the one before was acked, no sooner than the interval (ticks
// never pile up).
func (k *kit) timerTicks(ctx context.Context) error {
	if err := k.createWidget(ctx, tickingName, "tick", timerLabel); err != nil {
		return err
	}
	acks, err := k.awaitAcks(ctx, tickingName, tetherv1.DeliveryKind_DELIVERY_KIND_TICK, 3)
	if err != nil {
		return err
	}
	k.wire.mu.Lock()
	ds, _ := k.wire.exchangesLocked(tickingName, tetherv1.DeliveryKind_DELIVERY_KIND_TICK)
	k.wire.mu.Unlock()
	for i := range acks {
		if ds[i].d.GetScheduled() == nil {
			return fmt.Errorf("tick %d has no scheduled time", i+1)
		}
		if i == 0 {
			continue
		}
		if gap := ds[i].at.Sub(acks[i-1].at); gap < tickInterval-retryEarlySlack {
			return fmt.Errorf("tick %d came %v after tick %d's ack, sooner than the interval %v", i+1, gap, i, tickInterval)
		}
	}
	return nil
}

// timerAck checks that the ticks were acked OK and their result written,
// then deletes the widget, which the timer held, and waits for it to go.
func (k *kit) timerAck(ctx context.Context) error {
	acks, err := k.awaitAcks(ctx, tickingName, tetherv1.DeliveryKind_DELIVERY_KIND_TICK, 1)
	if err != nil {
		return err
	}
	if got := acks[0].a.GetOutcome(); got != tetherv1.Outcome_OUTCOME_OK {
		return fmt.Errorf("tick acked %v (%s), want OK", got, acks[0].a.GetMessage())
	}
	if err := k.awaitBindingResult(ctx, tickingName, "tick", map[string]any{"ticked": true}); err != nil {
		return err
	}
	return k.deleteAndAwaitGone(ctx, tickingName)
}

// deleteAndAwaitGone deletes the widget and waits until it is gone.
func (k *kit) deleteAndAwaitGone(ctx context.Context, name string) error {
	if err := k.widgets().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("deleting the widget %s: %w", name, err)
	}
	return k.awaitGone(ctx, name)
}

// awaitGone waits until the widget is gone.
func (k *kit) awaitGone(ctx context.Context, name string) error {
	return k.poll(ctx, "widget "+name+" gone after its delete", func(ctx context.Context) (bool, error) {
		_, err := k.widgets().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}
