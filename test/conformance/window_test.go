package main

import (
	"errors"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TestTheWindowRulesJudgeWhatTheHandlerHeld judges made-up exchanges of
// two slow creates with a window of one, as the proxy would record them.
func TestTheWindowRulesJudgeWhatTheHandlerHeld(t *testing.T) {
	const (
		ok    = tetherv1.Outcome_OUTCOME_OK
		retry = tetherv1.Outcome_OUTCOME_RETRY
	)
	t0 := time.Unix(0, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	ex := func(name string, attempt uint32, sent int, outcome tetherv1.Outcome, acked int) exchange {
		return exchange{d: &tetherv1.Delivery{Ref: &tetherv1.ObjectRef{Name: name}, Attempt: attempt}, sent: ms(sent),
			a: &tetherv1.Ack{Outcome: outcome}, acked: ms(acked)}
	}
	tests := []struct {
		name           string
		ds             []exchange
		bound, over    bool // pass
		nothingToJudge bool
	}{
		{name: "the second is handed back, then run after the first", ds: []exchange{
			ex("slow-1", 1, 0, ok, 1000), ex("slow-2", 1, 10, retry, 12), ex("slow-2", 2, 1500, ok, 2500),
		}, bound: true, over: true},
		{name: "a delivery that crossed the first's ack may run", ds: []exchange{
			ex("slow-1", 1, 0, ok, 1000), ex("slow-2", 1, 10, retry, 12), ex("slow-2", 2, 980, ok, 1980),
		}, bound: true, over: true},
		{name: "both run at once", ds: []exchange{
			ex("slow-1", 1, 0, ok, 1000), ex("slow-2", 1, 10, ok, 1010),
		}},
		{name: "the second waits its turn unanswered", ds: []exchange{
			ex("slow-1", 1, 0, ok, 1000), ex("slow-2", 1, 10, ok, 2000),
		}},
		{name: "the broker never sent past the window", ds: []exchange{
			ex("slow-1", 1, 0, ok, 1000), ex("slow-2", 1, 1500, ok, 2500),
		}, nothingToJudge: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for rule, c := range map[string]struct {
				err  error
				pass bool
			}{"window.bound": {heldAtOnce(tt.ds, 1), tt.bound}, "window.over": {handedBack(tt.ds, 1), tt.over}} {
				switch {
				case tt.nothingToJudge && !errors.Is(c.err, errNoneOver):
					t.Errorf("%s: %v, want %v", rule, c.err, errNoneOver)
				case !tt.nothingToJudge && (c.err == nil) != c.pass:
					t.Errorf("%s: %v, want pass = %v", rule, c.err, c.pass)
				}
			}
		})
	}
}
