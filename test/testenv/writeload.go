package testenv

import (
	"fmt"
	"sync"
	"time"
)

// WriteLoad makes writes at a steady rate, each on its own goroutine so
// that one slow write (a review that waits for a dead replica) does not
// slow the rate.
type WriteLoad struct {
	stopped  chan struct{}
	stop     sync.Once
	wg       sync.WaitGroup
	mu       sync.Mutex
	done     []Write
	underWay map[int]time.Time // begun, not ended, by index
}

// Write is one write of a load: when it began and ended, and its error.
type Write struct {
	Began, Ended time.Time
	Err          error
}

func (w Write) String() string {
	return fmt.Sprintf("begun %s, ended %s: %v", w.Began.Format("15:04:05.000"), w.Ended.Format("15:04:05.000"), w.Err)
}

// StartWriteLoad calls write(i) perSecond times a second, i counting from
// 0, until Stop.
func StartWriteLoad(perSecond int, write func(i int) error) *WriteLoad {
	l := &WriteLoad{stopped: make(chan struct{}), underWay: map[int]time.Time{}}
	l.wg.Go(func() {
		t := time.NewTicker(time.Second / time.Duration(perSecond))
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-l.stopped:
				return
			case <-t.C:
			}
			l.wg.Go(func() {
				began := time.Now()
				l.mu.Lock()
				l.underWay[i] = began
				l.mu.Unlock()
				err := write(i)
				l.mu.Lock()
				defer l.mu.Unlock()
				delete(l.underWay, i)
				l.done = append(l.done, Write{Began: began, Ended: time.Now(), Err: err})
			})
		}
	})
	return l
}

// DoneSince counts the writes begun at t or later that are done.
func (l *WriteLoad) DoneSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, w := range l.done {
		if !w.Began.Before(t) {
			n++
		}
	}
	return n
}

// UnderWay counts the writes begun before t that have not ended.
func (l *WriteLoad) UnderWay(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, began := range l.underWay {
		if began.Before(t) {
			n++
		}
	}
	return n
}

// Stop ends the load, waits for the writes under way and returns every
// write, in the order they ended. It may be called again.
func (l *WriteLoad) Stop() []Write {
	l.stop.Do(func() { close(l.stopped) })
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// FailedSince sorts the writes that failed by when they began: before t
// (a write under way when something was killed at t, which no design can
// save when the API server does not retry it) or from t on.
func FailedSince(writes []Write, t time.Time) (before, since []Write) {
	for _, w := range writes {
		switch {
		case w.Err == nil:
		case w.Began.Before(t):
			before = append(before, w)
		default:
			since = append(since, w)
		}
	}
	return before, since
}
