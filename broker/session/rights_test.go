package session

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/broker/binding"
)

// rights is an Authorize whose answer a test changes.
type rights struct {
	calls atomic.Int32
	deny  atomic.Bool
	fail  atomic.Bool // an error that says nothing about the rights
}

func (r *rights) authorize(_ context.Context, handler string, _ []*binding.Binding) error {
	r.calls.Add(1)
	switch {
	case r.deny.Load():
		return fmt.Errorf("%w: may not connect handlers.tether.dev %s", auth.ErrDenied, handler)
	case r.fail.Load():
		return errors.New("the API server is unreachable")
	}
	return nil
}

func TestWithdrawnRightsEndTheSession(t *testing.T) {
	var r rights
	h := start(t, Options{Authorize: r.authorize, RecheckEvery: 20 * time.Millisecond})
	c, _ := h.session(t)

	// Rechecks that cannot reach the API server keep the session.
	r.fail.Store(true)
	for start := r.calls.Load(); r.calls.Load() < start+3; {
		select {
		case <-c.ended:
			t.Fatalf("the session ended on an unanswered recheck: %v", c.err)
		case <-time.After(time.Millisecond):
		}
	}
	r.deny.Store(true)
	st := c.end()
	if st.Code() != codes.PermissionDenied || !strings.Contains(st.Message(), "rights withdrawn") || !strings.Contains(st.Message(), "secret-ttl") {
		t.Errorf("ended with %v %q, want PermissionDenied saying the rights were withdrawn", st.Code(), st.Message())
	}
}

func TestHelloIsRefusedWithoutTheRights(t *testing.T) {
	var r rights
	r.deny.Store(true)
	h := start(t, Options{Authorize: r.authorize})
	c := h.connect(t)
	c.send(hello())
	if st := c.end(); st.Code() != codes.PermissionDenied {
		t.Errorf("ended with %v %q, want PermissionDenied", st.Code(), st.Message())
	}
}
