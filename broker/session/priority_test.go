package session

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func priority(p int32) func(*tetherv1.Hello) { return func(h *tetherv1.Hello) { h.Priority = p } }

// TestPriorityIsAuthorizedAndCarried: the Hello's priority is what the
// rights are asked for (above 0 needs the takeover grant) and what the
// instance carries to the dispatcher, which gives the work to the highest.
func TestPriorityIsAuthorizedAndCarried(t *testing.T) {
	var r rights
	h := start(t, Options{Authorize: r.authorize})
	for _, p := range []int32{0, 7, tetherv1.MaxPriority} {
		_, in := h.session(t, priority(p))
		if in.Priority != p || r.priority.Load() != p {
			t.Errorf("Hello priority %d: the instance has %d, Authorize was asked for %d", p, in.Priority, r.priority.Load())
		}
	}
}

// TestPriorityOutOfRangeIsRefused: a priority below 0 or above MaxPriority
// ends the stream with InvalidArgument saying the range, before any right
// is asked for.
func TestPriorityOutOfRangeIsRefused(t *testing.T) {
	var r rights
	h := start(t, Options{Authorize: r.authorize})
	for _, p := range []int32{-1, tetherv1.MaxPriority + 1} {
		c := h.connect(t)
		c.send(hello(priority(p)))
		st := c.end()
		if st.Code() != codes.InvalidArgument || !strings.Contains(st.Message(), "priority: ") || !strings.Contains(st.Message(), "out of range 0..1000") {
			t.Errorf("priority %d: %v %q, want InvalidArgument naming priority and its range", p, st.Code(), st.Message())
		}
	}
	if n := r.calls.Load(); n != 0 {
		t.Errorf("Authorize asked %d times for Hellos refused as malformed", n)
	}
}
