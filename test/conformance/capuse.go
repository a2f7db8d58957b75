package main

import (
	"context"
	"errors"
	"fmt"
	"slices"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The widgets of scenario events, whose create posts an Event: the first
// on a session whose Welcome the handler gets as the broker sent it, the
// second on one whose Welcome lists capabilities without
// CAPABILITY_HANDLER_EVENTS (cap.use).
const (
	eventsName         = "events"
	eventsWithheldName = "events-withheld"
)

// capUse creates a widget of scenario events on the session going on, then
// ends it and creates another on the next one, whose Welcome the proxy gives
// the handler without CAPABILITY_HANDLER_EVENTS: the first create's ack
// carries the Event, the second's none, and both are OK.
func (k *kit) capUse(ctx context.Context) error {
	with, offered, err := k.createAndAwaitAck(ctx, eventsName)
	if err != nil {
		return err
	}
	k.wire.mu.Lock()
	before := len(k.wire.streams)
	k.wire.mu.Unlock()
	k.wire.renewWith(0, tetherv1.Capability_CAPABILITY_HANDLER_EVENTS)
	if err := k.wire.awaitErr(ctx, "fresh session welcomed without CAPABILITY_HANDLER_EVENTS", func() bool {
		for _, s := range k.wire.streams[before:] {
			if s.welcome != nil && !s.ended && lacksEvents(s.offered) {
				return true
			}
		}
		return false
	}); err != nil {
		return err
	}
	without, _, err := k.createAndAwaitAck(ctx, eventsWithheldName)
	if err != nil {
		return err
	}
	return judgeCapUse(offered, with, without)
}

// createAndAwaitAck creates the widget name of scenario events and returns
// its create's ack with the capabilities the handler was offered on the
// stream that carried it.
func (k *kit) createAndAwaitAck(ctx context.Context, name string) (*tetherv1.Ack, []tetherv1.Capability, error) {
	if err := k.createWidget(ctx, name, "events"); err != nil {
		return nil, nil, err
	}
	acks, err := k.awaitAcks(ctx, name, tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, 1)
	if err != nil {
		return nil, nil, err
	}
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	for _, s := range k.wire.streams {
		if a, ok := s.acks[acks[0].a.GetDeliveryId()]; ok && a.a == acks[0].a {
			return a.a, s.offered, nil
		}
	}
	return nil, nil, fmt.Errorf("no stream carried the ack of widget %s's create", name)
}

// lacksEvents says whether a Welcome offering caps lists capabilities
// without CAPABILITY_HANDLER_EVENTS: the broker then posts no Events.
func lacksEvents(caps []tetherv1.Capability) bool {
	return slices.Contains(caps, tetherv1.Capability_CAPABILITY_CAPABILITIES) &&
		!slices.Contains(caps, tetherv1.Capability_CAPABILITY_HANDLER_EVENTS)
}

// judgeCapUse judges the acks of scenario events' creates: with, on a
// session whose Welcome offered the handler offered, and without, on one
// whose Welcome listed capabilities without CAPABILITY_HANDLER_EVENTS. Both
// are OK; without carries no Event; with carries the Event when offered
// lists CAPABILITY_HANDLER_EVENTS (offered no capabilities at all, the
// handler may post it or not).
func judgeCapUse(offered []tetherv1.Capability, with, without *tetherv1.Ack) error {
	var errs []error
	for _, a := range []struct {
		what string
		ack  *tetherv1.Ack
	}{{eventsName, with}, {eventsWithheldName, without}} {
		if o := a.ack.GetOutcome(); o != tetherv1.Outcome_OUTCOME_OK {
			errs = append(errs, fmt.Errorf("widget %s's create acked %v (%q), want OK", a.what, o, a.ack.GetMessage()))
		}
	}
	if slices.Contains(offered, tetherv1.Capability_CAPABILITY_HANDLER_EVENTS) && len(with.GetEvents()) == 0 {
		errs = append(errs, fmt.Errorf("widget %s's create, on a session whose Welcome lists CAPABILITY_HANDLER_EVENTS, acked without its Event: nothing to judge", eventsName))
	}
	if n := len(without.GetEvents()); n > 0 {
		errs = append(errs, fmt.Errorf("widget %s's create, on a session whose Welcome lists capabilities without CAPABILITY_HANDLER_EVENTS, acked with %d Events (%s): the instance must drop them",
			eventsWithheldName, n, without.GetEvents()[0].GetReason()))
	}
	return errors.Join(errs...)
}
