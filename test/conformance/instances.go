package main

import (
	"context"
	"errors"
	"fmt"
)

// instanceID judges the Hellos of the two handler processes the kit ran:
// the first process kept one instance_id on every stream, and the second
// one (started again for status.permanent) took another.
func (k *kit) instanceID(ctx context.Context) error {
	k.wire.mu.Lock()
	defer k.wire.mu.Unlock()
	if k.relaunched == 0 || k.relaunched >= len(k.wire.streams) {
		return errors.New("the handler was not started a second time: nothing to judge")
	}
	return sameThenOther(k.wire.streams[:k.relaunched], k.wire.streams[k.relaunched:])
}

// sameThenOther fails unless every Hello of first names one instance_id,
// and no Hello of second names it.
func sameThenOther(first, second []*stream) error {
	id := ""
	for i, s := range first {
		switch got := s.hello.GetInstanceId(); {
		case s.hello == nil:
		case got == "":
			return fmt.Errorf("session %d's Hello has no instance_id", i+1)
		case id == "":
			id = got
		case got != id:
			return fmt.Errorf("the process changed its instance_id from %q to %q (session %d): it is the instance's for the process's life", id, got, i+1)
		}
	}
	for _, s := range second {
		if s.hello.GetInstanceId() == id {
			return fmt.Errorf("the handler started again has the instance_id %q of the one before", id)
		}
	}
	return nil
}
