package timer

import (
	"context"
	"fmt"
	"math/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/types"
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
	if len(s.byUID) != 0 || len(s.due.entries) != 0 {
		t.Errorf("after cancelling every key: %d objects, %d scheduled", len(s.byUID), len(s.due.entries))
	}
}

// TestSchedulerMatchesModel runs seeded random schedules, cancels and
// firings against a map of key to due time: the keys fired are those due,
// in the order of their times, and Len, Scheduled and the heap's size
// agree with the map after every step.
func TestSchedulerMatchesModel(t *testing.T) {
	for seed := range int64(8) {
		rnd := rand.New(rand.NewSource(seed))
		const uids = 40
		s := New(nil, nil)
		model := map[Key]time.Time{}
		now := time.Unix(1e9, 0)
		at := func() time.Time { return now.Add(time.Duration(rnd.Intn(1000)) * time.Millisecond) }
		key := func() Key {
			return Key{UID: types.UID(fmt.Sprint("u", rnd.Intn(uids))), Name: fmt.Sprint("t", rnd.Intn(2))}
		}
		for step := range 2000 {
			switch op := rnd.Intn(10); {
			case op < 5:
				k, a := key(), at()
				s.Schedule(k, a)
				model[k] = a
			case op < 6:
				k := key()
				s.Cancel(k)
				delete(model, k)
			case op < 7:
				uid := key().UID
				s.CancelUID(uid)
				for k := range model {
					if k.UID == uid {
						delete(model, k)
					}
				}
			default:
				now = now.Add(time.Duration(rnd.Intn(10)) * time.Millisecond)
				s.mu.Lock()
				fired, _ := s.takeDueLocked(now, nil)
				s.mu.Unlock()
				var want []firing
				for k, a := range model {
					if !a.After(now) {
						want = append(want, firing{k, a})
						delete(model, k)
					}
				}
				if len(fired) != len(want) || !slices.IsSortedFunc(fired, func(a, b firing) int { return a.at.Compare(b.at) }) {
					t.Fatalf("seed %d step %d: fired %v, want %v in time order", seed, step, fired, want)
				}
				for _, f := range fired {
					if !slices.Contains(want, f) {
						t.Fatalf("seed %d step %d: fired %v, want %v", seed, step, f, want)
					}
				}
			}
			if s.Len() != len(model) {
				t.Fatalf("seed %d step %d: Len %d, want %d", seed, step, s.Len(), len(model))
			}
			if n := len(s.due.entries); n > 2*len(model)+64 {
				t.Fatalf("seed %d step %d: the heap holds %d entries for %d keys", seed, step, n, len(model))
			}
			if step%100 != 0 {
				continue
			}
			for u := range uids {
				for n := range 2 {
					k := Key{UID: types.UID(fmt.Sprint("u", u)), Name: fmt.Sprint("t", n)}
					got, ok := s.Scheduled(k)
					if want, wok := model[k]; ok != wok || !got.Equal(want) {
						t.Fatalf("seed %d step %d: Scheduled(%v) = %v, %v; want %v, %v", seed, step, k, got, ok, want, wok)
					}
				}
			}
		}
	}
}

// BenchmarkTicks is the scheduler's share of a tick at a scale: n keys
// of their own objects, each rescheduled one interval on as it fires, the
// way a timer is after its ack.
func BenchmarkTicks(b *testing.B) {
	for _, n := range []int{10000, 100000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			s := New(nil, nil)
			now := time.Unix(1e9, 0)
			interval := time.Duration(n) * time.Microsecond
			rnd := rand.New(rand.NewSource(1))
			for i := range n {
				s.Schedule(Key{UID: types.UID(fmt.Sprint("uid-", i)), Name: "tick"}, now.Add(time.Duration(rnd.Int63n(int64(interval)))))
			}
			var due []firing
			b.ResetTimer()
			for fired := 0; fired < b.N; {
				now = now.Add(10 * time.Microsecond)
				s.mu.Lock()
				due, _ = s.takeDueLocked(now, due[:0])
				s.mu.Unlock()
				for _, f := range due {
					s.Schedule(f.key, now.Add(interval+time.Duration(rnd.Int63n(int64(time.Millisecond)))))
				}
				fired += len(due)
			}
		})
	}
}
