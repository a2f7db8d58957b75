package session

import (
	"context"
	"errors"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// closed is a channel that is closed: an acquire given it as abort takes a
// slot that is free now, or gives up with ErrMoved, without waiting.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// take acquires a slot for id now, or says why not.
func take(w *window, id string, review bool) error {
	_, err := w.acquire(context.Background(), id, review, closed, nil, nil)
	return err
}

// TestWindowSlots: the deliveries held stay within the window, a quarter
// of which (at least one, none of a window of one) is kept for reviews on
// an instance that answers them; a released slot is taken again.
func TestWindowSlots(t *testing.T) {
	for _, tc := range []struct {
		name    string
		size    int
		reviews bool
		takes   []string // "l" lifecycle, "r" review, in order
		want    string   // "+" taken, "-" no slot
		release bool     // then the first is released, and the last tried again
	}{
		{name: "a window of two takes two", size: 2, takes: []string{"l", "l", "l"}, want: "++-"},
		{name: "a released slot is taken again", size: 2, takes: []string{"l", "l", "l"}, want: "++-+", release: true},
		{name: "a quarter of the window is kept for reviews", size: 4, reviews: true,
			takes: []string{"l", "l", "l", "l", "r", "r"}, want: "+++-+-"},
		{name: "a review takes any slot", size: 2, reviews: true, takes: []string{"r", "r", "l"}, want: "++-"},
		{name: "a window of one keeps nothing for reviews", size: 1, reviews: true, takes: []string{"l", "r"}, want: "+-"},
		{name: "the zero window has no slot", takes: []string{"l"}, want: "-"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &window{size: tc.size, reviews: tc.reviews}
			var got []byte
			for i, k := range tc.takes {
				got = append(got, outcome(t, take(w, string(rune('a'+i)), k == "r")))
			}
			if tc.release {
				w.release("a")
				got = append(got, outcome(t, take(w, "again", tc.takes[len(tc.takes)-1] == "r")))
			}
			if string(got) != tc.want {
				t.Errorf("taken %s, want %s", got, tc.want)
			}
		})
	}
}

func outcome(t *testing.T, err error) byte {
	t.Helper()
	switch {
	case err == nil:
		return '+'
	case errors.Is(err, ErrMoved):
		return '-'
	}
	t.Fatalf("acquire: %v", err)
	return 0
}

// TestAnAbandonedDeliveryKeepsItsSlotUntilItsAck: the instance still holds
// a delivery it was told to cancel, until it acks it; when the ack came
// first, abandoning frees the slot at once.
func TestAnAbandonedDeliveryKeepsItsSlotUntilItsAck(t *testing.T) {
	w := window{size: 1}
	if err := take(&w, "a", false); err != nil {
		t.Fatal(err)
	}
	w.abandon("a")
	if w.held() != 1 || take(&w, "b", false) == nil {
		t.Fatalf("held %d: the abandoned delivery's slot was freed before its ack", w.held())
	}
	if !w.ack(&tetherv1.Ack{DeliveryId: "a"}) || w.held() != 0 {
		t.Fatalf("held %d after the abandoned delivery's ack, want 0", w.held())
	}
	c, err := w.acquire(context.Background(), "c", false, closed, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !w.ack(&tetherv1.Ack{DeliveryId: "c"}) || (<-c).ack.GetDeliveryId() != "c" {
		t.Fatal("the ack did not reach its delivery")
	}
	w.abandon("c") // the ack came first
	if w.held() != 0 {
		t.Errorf("held %d, want 0: abandoning an acked delivery frees its slot", w.held())
	}
	if w.ack(&tetherv1.Ack{DeliveryId: "c"}) || w.ack(&tetherv1.Ack{DeliveryId: "never-sent"}) {
		t.Error("an ack of no delivery waiting was taken")
	}
}

// TestAWaitForASlotEnds: a delivery waiting for a slot gets one when the
// window grows, and gives up when the session ends, its context ends, or
// its deadline passes.
func TestAWaitForASlotEnds(t *testing.T) {
	w := window{size: 1}
	if err := take(&w, "a", false); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := w.acquire(context.Background(), "b", false, nil, nil, nil)
		got <- err
	}()
	w.resize(2)
	select {
	case err := <-got:
		if err != nil {
			t.Fatalf("after the window grew: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a larger window did not end the wait for a slot")
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	expired := make(chan time.Time, 1)
	expired <- time.Time{}
	for _, tc := range []struct {
		name    string
		ctx     context.Context
		gone    chan struct{}
		expired chan time.Time
		want    error
	}{
		{"the session ended", context.Background(), closed, nil, ErrGone},
		{"the context ended", ctx, nil, nil, context.Canceled},
		{"the deadline passed", context.Background(), nil, expired, context.DeadlineExceeded},
	} {
		if _, err := w.acquire(tc.ctx, "c", false, nil, tc.gone, tc.expired); !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}

// TestALeavingWindowDrains: after Goodbye nothing more is taken, and the
// window is drained once what the instance holds is answered.
func TestALeavingWindowDrains(t *testing.T) {
	w := window{size: 2}
	if err := take(&w, "a", false); err != nil {
		t.Fatal(err)
	}
	w.leave()
	if err := take(&w, "b", false); !errors.Is(err, ErrLeaving) || !w.isLeaving() {
		t.Fatalf("after Goodbye: %v, want ErrLeaving", err)
	}
	done, change := w.drained()
	if done {
		t.Fatal("drained with a delivery held")
	}
	w.release("a")
	select {
	case <-change:
	default:
		t.Fatal("the release did not signal the change")
	}
	if done, _ := w.drained(); !done {
		t.Error("not drained once nothing is held")
	}
}
