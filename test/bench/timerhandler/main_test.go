package main

import (
	"context"
	"testing"
	"time"

	"github.com/tether-dev/tether/sdk"
)

func TestSummary(t *testing.T) {
	r := &recorder{ids: map[string]int32{}}
	base := time.Now().Truncate(time.Second).Add(-time.Minute)
	// Object a ticks at 0, 1, 2 and 3 s late by 1, 2, 3 and 4 ms; b once
	// at 1.5 s, 10 ms late; one tick of a falls before the window.
	add := func(uid string, at time.Duration, late time.Duration) {
		r.mu.Lock()
		id, ok := r.ids[uid]
		if !ok {
			id = int32(len(r.ids))
			r.ids[uid] = id
		}
		r.arrival = append(r.arrival, base.Add(at).UnixNano())
		r.late = append(r.late, int64(late))
		r.object = append(r.object, id)
		r.mu.Unlock()
	}
	add("a", -time.Second, time.Millisecond)
	for i := range 4 {
		add("a", time.Duration(i)*time.Second, time.Duration(i+1)*time.Millisecond)
	}
	add("b", 1500*time.Millisecond, 10*time.Millisecond)
	w := &Window{FromUnixNano: base.UnixNano(), ToUnixNano: base.Add(4 * time.Second).UnixNano()}
	s := r.summary(w, time.Second)
	if s.Ticks != 6 || s.Objects != 2 {
		t.Errorf("totals %d ticks, %d objects", s.Ticks, s.Objects)
	}
	ws := s.InWindow
	if ws.Delivered != 5 || ws.Objects != 2 || ws.MinPerObject != 1 || ws.MaxPerObject != 4 {
		t.Errorf("window %+v", ws)
	}
	if ws.P50Ms != 3 || ws.MaxMs != 10 || ws.P99Ms != 10 {
		t.Errorf("lateness p50 %v p99 %v max %v", ws.P50Ms, ws.P99Ms, ws.MaxMs)
	}
	if ws.MeanPeriodMs != 1000 {
		t.Errorf("mean period %v ms, want 1000", ws.MeanPeriodMs)
	}
	if len(ws.PerSecond) != 4 || ws.PerSecond[1].Ticks != 2 {
		t.Errorf("per second %+v", ws.PerSecond)
	}
	if got := r.summary(nil, time.Second); got.InWindow != nil {
		t.Error("a summary without a window has window stats")
	}
}

func TestTick(t *testing.T) {
	r := &recorder{ids: map[string]int32{}}
	ev := &sdk.Event{UID: "u", Scheduled: time.Now().Add(-5 * time.Millisecond)}
	if err := r.tick(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if st := r.stats(); st.Ticks != 1 || st.Objects != 1 {
		t.Errorf("stats %+v", st)
	}
	if r.late[0] < int64(5*time.Millisecond) {
		t.Errorf("lateness %v", time.Duration(r.late[0]))
	}
}
