package timer

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type fired struct {
	mu   sync.Mutex
	keys []Key
	c    chan Key
}

func newFired() *fired { return &fired{c: make(chan Key, 100)} }

func (f *fired) fire(k Key, _ time.Time) {
	f.mu.Lock()
	f.keys = append(f.keys, k)
	f.mu.Unlock()
	f.c <- k
}

func run(t *testing.T, s *Scheduler) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = s.Start(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func expect(t *testing.T, f *fired, want Key) {
	t.Helper()
	select {
	case got := <-f.c:
		if got != want {
			t.Fatalf("fired %v, want %v", got, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%v never fired", want)
	}
}

func TestKeysFireInTimeOrder(t *testing.T) {
	f := newFired()
	s := New(f.fire, nil)
	now := time.Now()
	a, b, c := Key{"u1", "a"}, Key{"u2", "b"}, Key{"u3", "c"}
	s.Schedule(c, now.Add(60*time.Millisecond))
	s.Schedule(a, now.Add(20*time.Millisecond))
	s.Schedule(b, now.Add(40*time.Millisecond))
	run(t, s)
	expect(t, f, a)
	expect(t, f, b)
	expect(t, f, c)
	if s.Len() != 0 {
		t.Errorf("Len after firing = %d", s.Len())
	}
}

func TestRescheduleReplacesTheEarlierTime(t *testing.T) {
	f := newFired()
	s := New(f.fire, nil)
	k, marker := Key{"u", "t"}, Key{"m", "marker"}
	s.Schedule(k, time.Now().Add(time.Hour))
	run(t, s)
	s.Schedule(k, time.Now().Add(10*time.Millisecond)) // earlier: must wake the loop
	expect(t, f, k)
	s.Schedule(k, time.Now().Add(30*time.Millisecond))
	s.Schedule(k, time.Now().Add(time.Hour)) // later again: must not fire soon
	s.Schedule(marker, time.Now().Add(50*time.Millisecond))
	expect(t, f, marker)
	if at, ok := s.Scheduled(k); !ok || time.Until(at) < 30*time.Minute {
		t.Errorf("k scheduled at %v, %v; want about an hour from now", at, ok)
	}
}

func TestCancelAndCancelUID(t *testing.T) {
	f := newFired()
	s := New(f.fire, nil)
	now := time.Now()
	s.Schedule(Key{"u1", "a"}, now.Add(10*time.Millisecond))
	s.Schedule(Key{"u1", "b"}, now.Add(10*time.Millisecond))
	s.Schedule(Key{"u2", "a"}, now.Add(20*time.Millisecond))
	s.Schedule(Key{"u3", "a"}, now.Add(30*time.Millisecond))
	s.CancelUID("u1")
	s.Cancel(Key{"u2", "a"})
	if s.Len() != 1 {
		t.Fatalf("Len = %d, want 1", s.Len())
	}
	run(t, s)
	expect(t, f, Key{"u3", "a"})
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.keys) != 1 {
		t.Errorf("fired %v, want only u3", f.keys)
	}
}

func TestFiredKeyIsScheduledAgainAndForgottenWhenCancelled(t *testing.T) {
	f := newFired()
	s := New(f.fire, nil)
	k, other := Key{"u1", "tick"}, Key{"u2", "tick"}
	run(t, s)
	s.Schedule(k, time.Now())
	expect(t, f, k)
	if _, ok := s.Scheduled(k); ok {
		t.Error("a fired key still counts as scheduled")
	}
	s.Schedule(k, time.Now().Add(10*time.Millisecond))
	expect(t, f, k)
	s.Schedule(other, time.Now())
	expect(t, f, other)
	s.Cancel(k)
	s.CancelUID(other.UID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.byUID) != 0 || len(s.items) != 0 {
		t.Errorf("after cancelling every key: %d objects, %d scheduled", len(s.byUID), len(s.items))
	}
}

func BenchmarkScheduleAndFire(b *testing.B) {
	var n int
	s := New(func(Key, time.Time) { n++ }, nil)
	keys := make([]Key, 10000)
	for i := range keys {
		keys[i] = Key{UID: "u", Name: string(rune(i))}
	}
	past := time.Now().Add(-time.Second)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s.Schedule(keys[i%len(keys)], past.Add(time.Duration(i%997)*time.Microsecond))
	}
	_ = n
}
