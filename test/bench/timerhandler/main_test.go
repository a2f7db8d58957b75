package main

import (
	"context"
	"testing"
	"time"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/bench/timerstats"
)

// The summary itself is timerstats.Summarize's, tested there.

func TestTick(t *testing.T) {
	r := &recorder{ids: map[string]int32{}}
	scheduled := time.Now().Add(-5 * time.Millisecond)
	for _, uid := range []string{"u", "v", "u"} {
		if err := r.tick(context.Background(), &sdk.Event{UID: uid, Scheduled: scheduled}); err != nil {
			t.Fatal(err)
		}
	}
	if st := r.stats(); st.Ticks != 3 || st.Objects != 2 {
		t.Errorf("stats %+v", st)
	}
	tk := r.ticks()
	if len(tk.UIDs) != 2 || tk.UIDs[1] != "v" || tk.Object[2] != 0 || tk.Scheduled[0] != scheduled.UnixNano() {
		t.Errorf("ticks %+v", tk)
	}
	if late := time.Duration(tk.Arrival[0] - tk.Scheduled[0]); late < 5*time.Millisecond || tk.Ack[0] < tk.Arrival[0] {
		t.Errorf("lateness %v, ack %d before arrival %d", late, tk.Ack[0], tk.Arrival[0])
	}
	w := &timerstats.Window{FromUnixNano: scheduled.Add(-time.Second).UnixNano(), ToUnixNano: time.Now().Add(time.Second).UnixNano()}
	s := r.summary(w, timerstats.Schedule{Interval: time.Minute})
	if s.Ticks != 3 || s.Objects != 2 || s.InWindow == nil || s.InWindow.Delivered != 2 {
		t.Errorf("summary %+v, window %+v", s, s.InWindow)
	}
}

// A recording that outgrows a block keeps every tick in order and leaves
// the ticks it had where they were: growing never copies them.
func TestRecordingGrowsWithoutMovingEarlierTicks(t *testing.T) {
	r := &recorder{ids: map[string]int32{}}
	tickAt := func(i int) {
		t.Helper()
		if err := r.tick(context.Background(), &sdk.Event{UID: "u", Scheduled: time.Unix(0, int64(i))}); err != nil {
			t.Fatal(err)
		}
	}
	tickAt(0)
	first := &r.blocks[0].scheduled[0]
	n := 2*blockTicks + 3
	for i := 1; i < n; i++ {
		tickAt(i)
	}
	if &r.blocks[0].scheduled[0] != first {
		t.Error("the first tick moved when the record grew")
	}
	tk := r.ticks()
	if tk.Len() != n || len(r.blocks) != 3 {
		t.Fatalf("%d ticks in %d blocks, want %d in 3", tk.Len(), len(r.blocks), n)
	}
	for i, s := range tk.Scheduled {
		if s != int64(i) {
			t.Fatalf("tick %d scheduled at %d", i, s)
		}
	}
}
