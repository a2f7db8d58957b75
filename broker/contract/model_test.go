package contract

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// The model test drives random histories of one handler and the objects of
// one name (created, changed, deleted, re-created) through Absence.At and
// Decide, the way the dispatcher does, and judges every step against the
// history itself rather than against the inputs the functions were given:
// when the broker last started, when the handler last left, what the
// handler acknowledged. Its errors name the rules of "The contract" in
// docs/design.md. Writes are refused at random and broker restarts
// forget everything not on the object or in the Lease.

const (
	modelSequences = 10000
	modelSteps     = 60
	modelGrace     = 30 * time.Second
	modelAfter     = 10 * time.Minute
	// modelRenew is how stale the Lease's last-seen may be when a broker
	// dies with the handler connected: the broker can count the handler's
	// absence from no later moment.
	modelRenew = 10 * time.Second
)

// world is the truth the model keeps; brokerView is what a broker knows.
type world struct {
	rng *rand.Rand
	now time.Time
	log []string

	// The object of the name, if any.
	exists, deleting, held bool
	generation             int
	matches                bool   // its labels match the handler's bindings
	policy                 Policy // what the handler's bindings ask for
	acked                  bool   // the handler acknowledged its deletion work
	gaveUp, timedOut       bool   // the broker gave up on it / a daemon stop timed out

	connected   bool
	leftAt      time.Time // when the handler's last instance left (zero: connected since start)
	startedAt   time.Time // when this broker started
	accepting   time.Time // when it could accept instances (zero: not yet)
	leaseSince  time.Time // what the Lease says of the handler's absence
	refuseWrite bool      // the next write is refused
}

func (w *world) step(format string, args ...any) {
	w.log = append(w.log, fmt.Sprintf("%6.1fs ", w.now.Sub(time.Unix(0, 0)).Seconds())+fmt.Sprintf(format, args...))
}

func (w *world) object() Object {
	o := Object{Deleting: w.deleting, Held: w.held}
	if w.matches {
		o.Policy = w.policy
	}
	switch {
	case w.timedOut:
		o.Work = TimedOut
	case w.acked:
		o.Work = Acked
	case w.gaveUp:
		o.Work = GaveUp
	}
	return o
}

func (w *world) absence() Absence {
	return Absence{Connected: w.connected, Since: w.leaseSince, Accepting: w.accepting, Grace: modelGrace, ReleaseAfter: modelAfter}
}

// act is one random thing happening in the cluster, to the handler or to
// the broker.
func (w *world) act() {
	switch w.rng.IntN(13) {
	case 0:
		if !w.exists {
			w.exists, w.deleting, w.held = true, false, false
			w.acked, w.gaveUp, w.timedOut = false, false, false
			w.generation++
			w.matches = w.rng.IntN(4) > 0
			w.step("object created (generation %d, matches %v)", w.generation, w.matches)
		}
	case 1:
		if w.exists && !w.deleting {
			w.matches = !w.matches
			w.step("labels changed: matches %v", w.matches)
		}
	case 2:
		if w.exists && !w.deleting {
			w.deleting = true
			w.step("deleted")
			if !w.held {
				w.exists = false
				w.step("gone at once: nothing held it")
			}
		}
	case 3:
		if !w.connected && !w.accepting.IsZero() {
			w.connected = true
			w.leaseSince = time.Time{}
			// A returning handler may come back with other bindings.
			if w.rng.IntN(3) == 0 {
				w.policy = Policy(w.rng.IntN(3))
			}
			w.step("handler connected (policy %v)", w.policy)
		}
	case 4:
		if w.connected {
			w.connected = false
			w.leftAt, w.leaseSince = w.now, w.now
			w.step("handler left")
		}
	case 5:
		if w.connected && w.deleting {
			w.acked = true
			w.step("handler acknowledged its deletion work")
		}
	case 6:
		if w.connected && w.deleting {
			w.gaveUp = true
			w.step("broker gave up on the deletion work (retries, ack timeout)")
		}
	case 7:
		if w.connected && w.deleting && w.rng.IntN(3) == 0 {
			w.timedOut = true
			w.step("a daemon's cancellation timeout passed")
		}
	case 8:
		// SIGKILL, failover, an API server outage past the renew deadline.
		// The Lease keeps the absence; a connected handler's session ends
		// with the broker, last seen a little before.
		if w.connected {
			w.connected = false
			w.leftAt = w.now
			w.leaseSince = w.now.Add(-time.Duration(w.rng.Int64N(int64(modelRenew))))
		}
		w.accepting = time.Time{}
		w.acked, w.gaveUp, w.timedOut = false, false, false // in memory only: done again
		w.now = w.now.Add(time.Duration(w.rng.IntN(600)) * time.Second)
		w.startedAt = w.now
		w.step("broker restarted")
	case 9:
		if w.accepting.IsZero() {
			w.accepting = w.now
			w.step("broker synced and accepting")
		}
	case 10:
		w.refuseWrite = true
		w.step("the next write will be refused")
	default:
		d := time.Duration(w.rng.ExpFloat64() * float64(20*time.Second))
		if w.rng.IntN(10) == 0 {
			d = time.Duration(w.rng.IntN(int(modelAfter/time.Second)+60)) * time.Second
		}
		w.now = w.now.Add(d)
		w.step("clock +%v", d.Round(time.Millisecond))
	}
}

// reconcile is the dispatcher's pass: decide, judge, write.
func (w *world) reconcile() error {
	if !w.exists {
		return nil
	}
	p, _ := w.absence().At(w.now)
	o := w.object()
	d := Decide(o, p)
	if err := checkLocal(o, p, d); err != nil {
		return err
	}
	if err := w.judge(o, p, d); err != nil {
		return err
	}
	if d.Action == Keep {
		return nil
	}
	if w.refuseWrite {
		w.refuseWrite = false
		w.step("write refused: %v (%s)", d.Action, d.Rule)
		return nil
	}
	w.step("%v hold (rule %s) as %v", d.Action, d.Rule, p)
	w.held = d.Action == Add
	if w.deleting && !w.held {
		w.exists = false
		w.step("gone")
	}
	return nil
}

// judge checks a decision against the history.
func (w *world) judge(o Object, p Presence, d Decision) error {
	if d.Action != Release {
		return nil
	}
	switch d.Rule {
	case RuleAbsent, RuleLongAbsent:
		if w.connected {
			return fmt.Errorf("released by %s while an instance is connected", d.Rule)
		}
		if w.accepting.IsZero() || w.now.Before(w.accepting.Add(modelGrace)) {
			return fmt.Errorf("released by %s within a grace of the broker's start", d.Rule)
		}
		if !w.leftAt.IsZero() && w.now.Before(w.leftAt.Add(modelGrace)) {
			return fmt.Errorf("released by %s within a grace of the handler leaving", d.Rule)
		}
		if d.Rule == RuleLongAbsent && !w.leftAt.IsZero() && w.now.Before(w.leftAt.Add(modelAfter-modelRenew)) {
			return fmt.Errorf("stripped by 3d before absent_release_after")
		}
		if w.matches && w.policy == Strict {
			return fmt.Errorf("a STRICT hold released by absence")
		}
	case RuleAcked:
		if w.matches && w.policy == Strict && !w.acked {
			return fmt.Errorf("a STRICT hold released without the handler's acknowledgement")
		}
		if !w.acked && !w.gaveUp {
			return fmt.Errorf("released by 3a with nothing acknowledged")
		}
	case RuleTimeout:
		if !w.timedOut {
			return fmt.Errorf("released by 3b without a timeout")
		}
	case RuleNoLongerMatching:
		if w.matches && w.policy != NoHold {
			return fmt.Errorf("released by 3e while a binding holds it")
		}
	}
	return nil
}

// settle ends a history the way an operator's life ends: the handler goes
// away for good and the object is deleted. Unless STRICT keeps it, it must
// be gone within one grace after the broker can accept, whatever came
// before.
func (w *world) settle() error {
	if w.connected {
		w.connected = false
		w.leftAt, w.leaseSince = w.now, w.now
		w.step("handler left for good")
	}
	if w.accepting.IsZero() {
		w.accepting = w.now
		w.step("broker synced and accepting")
	}
	if w.exists && !w.deleting {
		w.deleting = true
		w.step("deleted")
		if !w.held {
			w.exists = false
		}
	}
	w.refuseWrite = false
	deadline := later(w.leftAt, w.accepting).Add(modelGrace)
	if w.now.Before(deadline) {
		w.now = deadline
		w.step("clock to the end of the grace")
	}
	for range 3 {
		if err := w.reconcile(); err != nil {
			return err
		}
	}
	if w.exists && !(w.matches && w.policy == Strict) {
		return fmt.Errorf("still held past the grace (policy %v, matches %v)", w.policy, w.matches)
	}
	return nil
}

func TestContractHoldsOverRandomHistories(t *testing.T) {
	start := time.Now()
	for seed := range uint64(modelSequences) {
		w := &world{rng: rand.New(rand.NewPCG(seed, 0x7e7e)), now: time.Unix(0, 0), policy: Hold}
		w.startedAt, w.accepting = w.now, w.now
		w.connected = true
		err := func() error {
			for range modelSteps {
				w.act()
				if err := w.reconcile(); err != nil {
					return err
				}
			}
			return w.settle()
		}()
		if err != nil {
			t.Fatalf("seed %d: %v\nhistory:\n  %s", seed, err, strings.Join(w.log, "\n  "))
		}
	}
	t.Logf("%d histories of %d steps in %v", modelSequences, modelSteps, time.Since(start).Round(time.Millisecond))
}

// TestAbsenceAt covers the grace and long absence, across broker restarts.
func TestAbsenceAt(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	tests := []struct {
		name     string
		a        Absence
		now      time.Time
		want     Presence
		wantNext time.Time
	}{
		{"connected", Absence{Connected: true, Accepting: t0, Grace: 30 * time.Second}, at(100), Present, time.Time{}},
		{"not yet accepting", Absence{Since: at(-3600), Grace: 30 * time.Second}, at(100), InGrace, time.Time{}},
		{"in grace", Absence{Since: at(10), Accepting: t0, Grace: 30 * time.Second, ReleaseAfter: 600 * time.Second}, at(20), InGrace, at(40)},
		{"past grace", Absence{Since: at(10), Accepting: t0, Grace: 30 * time.Second, ReleaseAfter: 600 * time.Second}, at(40), Absent, at(610)},
		{"long absent", Absence{Since: at(10), Accepting: t0, Grace: 30 * time.Second, ReleaseAfter: 600 * time.Second}, at(610), LongAbsent, time.Time{}},
		{"never long absent", Absence{Since: at(10), Accepting: t0, Grace: 30 * time.Second}, at(100000), Absent, time.Time{}},
		{"restart gives a full grace", Absence{Since: at(-3600), Accepting: t0, Grace: 30 * time.Second, ReleaseAfter: 600 * time.Second}, at(29), InGrace, at(30)},
		{"restart: long absence not before the grace", Absence{Since: at(-3600), Accepting: t0, Grace: 30 * time.Second, ReleaseAfter: 600 * time.Second}, at(30), LongAbsent, time.Time{}},
		{"restart: long absence counts from the leaving", Absence{Since: at(-500), Accepting: t0, Grace: 30 * time.Second, ReleaseAfter: 600 * time.Second}, at(30), Absent, at(100)},
		{"no instance has left yet", Absence{Accepting: t0, Grace: 30 * time.Second}, at(30), InGrace, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, next := tt.a.At(tt.now)
			if got != tt.want || !next.Equal(tt.wantNext) {
				t.Errorf("At = %v, next %v; want %v, next %v", got, next, tt.want, tt.wantNext)
			}
		})
	}
}
