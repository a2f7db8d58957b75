package chaos

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// at is sec seconds into the run, to the microsecond.
func at(sec float64) time.Time { return t0.Add(time.Duration(math.Round(sec*1e6)) * time.Microsecond) }

const hold = HoldPrefix + "chaos"

// history is a ten-minute run of the handler "chaos" made of parts: Ops,
// Deliveries, Observations, Events, Objects (the final state), Faults,
// BrokerReports, and slices of parts.
func history(parts ...any) *History {
	h := &History{Seed: 7, Handler: "chaos", Start: t0, Quiet: at(600), End: at(700), Grace: 30 * time.Second, Bound: time.Minute}
	var add func(p any)
	add = func(p any) {
		switch p := p.(type) {
		case Op:
			h.Ops = append(h.Ops, p)
		case Delivery:
			h.Deliveries = append(h.Deliveries, p)
		case Observation:
			h.Observations = append(h.Observations, p)
		case Event:
			h.Events = append(h.Events, p)
		case Object:
			h.Final = append(h.Final, p)
		case Fault:
			h.Faults = append(h.Faults, p)
		case BrokerReport:
			h.Brokers = append(h.Brokers, p)
		case []any:
			for _, q := range p {
				add(q)
			}
		default:
			panic(fmt.Sprintf("not a part of a history: %T", p))
		}
	}
	for _, p := range parts {
		add(p)
	}
	return h
}

func resourceOf(uid string) string {
	if strings.HasPrefix(uid, "cm") {
		return ConfigMaps
	}
	return Widgets
}

func op(sec float64, kind OpKind, uid string) Op {
	return Op{At: at(sec), Kind: kind, Resource: resourceOf(uid), Namespace: "load", Name: "n-" + uid, UID: uid}
}

func refused(o Op) Op { o.Err = "the object has been modified"; return o }

var kindOf = map[string]string{
	BindingCreate: "create", BindingUpdate: "update", BindingDelete: "delete", BindingStrictDelete: "delete",
	BindingTimer: "tick", BindingNoneTimer: "tick", BindingDaemon: "daemon", BindingEvent: "event", BindingValidate: "validate",
}

// delivery of binding for uid, received at recv and answered at ans.
func delivery(recv, ans float64, binding, uid, outcome string) Delivery {
	return Delivery{Received: at(recv), Answered: at(ans), Instance: "handler-1", Binding: binding, Kind: kindOf[binding],
		Resource: resourceOf(uid), Namespace: "load", Name: "n-" + uid, UID: uid, ResourceVersion: "1", Attempt: 1, Outcome: outcome}
}

func seen(sec float64, uid string, finalizers ...string) Observation {
	return Observation{At: at(sec), Resource: resourceOf(uid), Namespace: "load", Name: "n-" + uid, UID: uid, Finalizers: finalizers}
}

func seenDeleting(sec float64, uid string, finalizers ...string) Observation {
	o := seen(sec, uid, finalizers...)
	o.Deleting = true
	return o
}

func seenGone(sec float64, uid string) Observation {
	o := seen(sec, uid)
	o.Gone = true
	return o
}

// goneHeld is an object seen gone in its last known state (the watch
// missed its deletion), which may still show finalizers.
func goneHeld(sec float64, uid string, finalizers ...string) Observation {
	o := seenGone(sec, uid)
	o.Finalizers = finalizers
	return o
}

func event(sec float64, uid, reason, message string) Event {
	return Event{At: at(sec), UID: uid, Reason: reason, Message: message}
}

// left is an object in the final state; deleting since sec when sec >= 0.
func left(uid string, sec float64, finalizers ...string) Object {
	o := Object{Resource: resourceOf(uid), Namespace: "load", Name: "n-" + uid, UID: uid, Finalizers: finalizers}
	if sec >= 0 {
		o.Deleting, o.DeletingSince = true, at(sec)
	}
	return o
}

// deletedWidget is the life of a widget that nothing went wrong for:
// created at sec, held, deleted, its delete answered, released, gone.
func deletedWidget(uid string, sec float64) []any {
	return []any{
		op(sec, OpCreate, uid), seen(sec+0.1, uid, hold), delivery(sec+0.1, sec+0.2, BindingCreate, uid, "ok"),
		op(sec+5, OpDelete, uid), seenDeleting(sec+5, uid, hold), delivery(sec+5.1, sec+5.2, BindingDelete, uid, "ok"),
		seenGone(sec+5.3, uid),
	}
}

// heldThenReleased is a widget or ConfigMap seen held at 1, deleting at
// 10 and released at 12.
func heldThenReleased(uid string) []any {
	return []any{seen(1, uid, hold), op(10, OpDelete, uid), seenDeleting(10, uid, hold), seenDeleting(12, uid), seenGone(13, uid)}
}

type checkCase struct {
	name string
	h    *History
	want []string // the checks that fail, in the order Check gives them
}

func runChecks(t *testing.T, cases []checkCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got, lines []string
			for _, v := range Check(c.h) {
				got, lines = append(got, v.Check), append(lines, v.String())
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("got %v, want %v\n%s", got, c.want, strings.Join(lines, "\n"))
			}
		})
	}
}

func TestStuckHoldPastGraceAndBoundIsAViolation(t *testing.T) {
	runChecks(t, []checkCase{
		{"deleting with the hold for longer than grace and bound", history(left("w1", 600, hold)), []string{"stuck-hold"}},
		{"deleting with the hold within grace and bound", history(left("w1", 620, hold)), nil},
		{"held and not deleting", history(left("w1", -1, hold)), nil},
		{"deleting long with only a foreign finalizer", history(left("w1", 100, ForeignFinalizer)), nil},
		{"the hold of another handler", history(left("w1", -1, HoldPrefix+"other")), []string{"stuck-hold"}},
		{"deleting since a time nothing shows", history(Object{Resource: Widgets, UID: "w1", Deleting: true, Finalizers: []string{hold}}), []string{"stuck-hold"}},
		{"deleting since a time only an observation shows, within the bound", history(
			Object{Resource: Widgets, UID: "w1", Deleting: true, Finalizers: []string{hold}}, seenDeleting(650, "w1", hold)), nil},
	})
}

func TestCreateWithoutAnOkCreateDeliveryIsAViolation(t *testing.T) {
	created := op(5, OpCreate, "w1")
	runChecks(t, []checkCase{
		{"never delivered", history(created, left("w1", -1, hold)), []string{"create-missed"}},
		{"only answered retry", history(created, left("w1", -1), delivery(6, 6.1, BindingCreate, "w1", "retry")), []string{"create-missed"}},
		{"answered ok", history(created, left("w1", -1), delivery(6, 6.1, BindingCreate, "w1", "ok")), nil},
		{"deleting at the end", history(created, left("w1", 650)), nil},
		{"gone at the end, never held", history(created), nil},
		{"held live, then deleted, never answered", history(created, seen(6, "w1", hold), seenDeleting(10, "w1", hold), seenGone(11, "w1")), []string{"delete-skipped", "create-missed"}},
		{"held live and answered, then deleted", history(created, delivery(5.5, 6, BindingCreate, "w1", "ok"), seen(6, "w1", hold),
			seenDeleting(10, "w1", hold), delivery(10.1, 10.2, BindingDelete, "w1", "ok"), seenGone(11, "w1")), nil},
		{"held live while its create kept failing, then deleted", history(created, event(6, "w1", "HandlerRetrying", "asks to retry"),
			seen(6, "w1", hold), seenDeleting(10, "w1", hold), delivery(10.1, 10.2, BindingDelete, "w1", "ok"), seenGone(11, "w1")), nil},
		{"seen held only while deleting", history(created, seenDeleting(10, "w1", hold), seenGone(11, "w1")), []string{"delete-skipped"}},
		{"the create refused", history(refused(created)), nil},
		{"a ConfigMap, which has no create binding", history(op(5, OpCreate, "cm1"), left("cm1", -1)), nil},
	})
}

func TestReleaseBeforeTheDeleteAckIsAViolation(t *testing.T) {
	life := heldThenReleased("w1")
	runChecks(t, []checkCase{
		{"released before the delete was delivered", history(life), []string{"delete-skipped"}},
		{"released, then the delete answered", history(life, delivery(11, 14, BindingDelete, "w1", "ok")), []string{"delete-skipped"}},
		{"the delete answered ok, then released", history(life, delivery(10.5, 11, BindingDelete, "w1", "ok")), nil},
		{"the delete answered fail, then released", history(life, delivery(10.5, 11, BindingDelete, "w1", "fail")), nil},
		{"the delete answered within the clock skew", history(life, delivery(10.5, 12.9, BindingDelete, "w1", "ok")), nil},
		{"the delete only answered retry", history(life, delivery(10.5, 11, BindingDelete, "w1", "retry")), []string{"delete-skipped"}},
		{"seen held, then next seen gone", history(seen(1, "w1", hold), seenGone(12, "w1")), []string{"delete-skipped"}},
		{"seen held, then gone in its last known state, held", history(seen(1, "w1", hold), goneHeld(12, "w1", hold)), []string{"delete-skipped"}},
		{"seen held, answered, then seen gone", history(seen(1, "w1", hold), delivery(5, 6, BindingDelete, "w1", "ok"), seenGone(12, "w1")), nil},
		{"never seen held", history(op(10, OpDelete, "w1"), seenDeleting(10, "w1"), seenGone(13, "w1")), nil},
		{"stripped while live (rule 3d), then deleted", history(seen(1, "w1", hold), seen(5, "w1"), seenDeleting(10, "w1"), seenGone(13, "w1")), nil},
	})
}

func TestDeleteReleasedByANamedRuleIsNoViolation(t *testing.T) {
	life := heldThenReleased("w1")
	runChecks(t, []checkCase{
		{"HoldReleased naming rule 3c", history(life, event(11.5, "w1", "HoldReleased", "handler \"chaos\" ... (rule 3c)")), nil},
		{"RetriesExhausted", history(life, event(11, "w1", "RetriesExhausted", "delete failed 5 times")), nil},
		{"DaemonStopTimeout", history(life, event(11, "w1", "DaemonStopTimeout", "daemon did not stop")), nil},
		{"the Event within the clock skew after", history(life, event(12.9, "w1", "HoldReleased", "(rule 3c)")), nil},
		{"the Event too long after", history(life, event(14, "w1", "HoldReleased", "(rule 3c)")), []string{"delete-skipped"}},
		{"the Event within the clock skew before the deletion was seen, before the delete returned", history(seen(1, "w1", hold),
			seenDeleting(8, "w1", hold), event(7.5, "w1", "HoldReleased", "(rule 3c)"), op(10, OpDelete, "w1"), seenDeleting(12, "w1")), nil},
		{"the Event before a deletion only the delete op shows", history(seen(1, "w1", hold), op(10, OpDelete, "w1"), seenGone(12, "w1"),
			event(3, "w1", "RetriesExhausted", "update failed 5 times")), []string{"delete-skipped"}},
		{"the Event before the deletion", history(life, event(3, "w1", "RetriesExhausted", "update failed 5 times")), []string{"delete-skipped"}},
		{"an Event of another reason", history(life, event(11, "w1", "HandlerRetrying", "")), []string{"delete-skipped"}},
		{"the Event of another object", history(life, event(11, "w2", "HoldReleased", "(rule 3c)")), []string{"delete-skipped"}},
	})
}

func TestStrictReleasedWithoutItsAckIsAViolation(t *testing.T) {
	life := heldThenReleased("cm1")
	runChecks(t, []checkCase{
		{"released before the strict delete answered", history(life), []string{"strict-released"}},
		{"the strict delete answered, then released", history(life, delivery(10.5, 11, BindingStrictDelete, "cm1", "ok")), nil},
		{"the strict delete answered fail, then released", history(life, delivery(10.5, 11, BindingStrictDelete, "cm1", "fail")), nil},
		{"released with HoldReleased naming rule 3c", history(life, event(11, "cm1", "HoldReleased", "(rule 3c)")), []string{"strict-released"}},
		{"released with RetriesExhausted", history(life, event(11, "cm1", "RetriesExhausted", "")), []string{"strict-released"}},
		{"released when a cancellation timeout ran out", history(life, event(11, "cm1", "DaemonStopTimeout", "")), nil},
		{"seen held, then next seen gone", history(seen(1, "cm1", hold), seenGone(12, "cm1")), []string{"strict-released"}},
	})
}

func TestForeignFinalizerRemovedByAnyoneElseIsAViolation(t *testing.T) {
	with := seen(1, "w1", ForeignFinalizer)
	runChecks(t, []checkCase{
		{"it disappears with no remove", history(with, seen(5, "w1")), []string{"foreign-removed"}},
		{"the foreign controller removed it", history(with, op(4.8, OpForeignRemove, "w1"), seen(5, "w1")), nil},
		{"its remove logged within the clock skew after", history(with, seen(5, "w1"), op(5.9, OpForeignRemove, "w1")), nil},
		{"its remove logged too long after", history(with, seen(5, "w1"), op(7, OpForeignRemove, "w1")), []string{"foreign-removed"}},
		{"its remove refused", history(with, refused(op(4.8, OpForeignRemove, "w1")), seen(5, "w1")), []string{"foreign-removed"}},
		{"seen with it, then gone with no remove", history(with, seenGone(9, "w1")), []string{"foreign-removed"}},
		{"seen with it, then gone in its last known state, with it", history(with, goneHeld(9, "w1", ForeignFinalizer)), []string{"foreign-removed"}},
		{"seen with it, removed, then gone", history(with, op(8, OpForeignRemove, "w1"), seenGone(9, "w1")), nil},
		{"one remove, gone twice", history(with, op(4, OpForeignRemove, "w1"), seen(5, "w1"),
			seen(6, "w1", ForeignFinalizer), seen(8, "w1")), []string{"foreign-removed"}},
		{"a remove of another object", history(with, op(4, OpForeignRemove, "w2"), seen(5, "w1")), []string{"foreign-removed"}},
		{"the hold released, the foreign finalizer kept", history(seenDeleting(1, "w1", hold, ForeignFinalizer),
			delivery(1, 1.1, BindingDelete, "w1", "ok"), seenDeleting(2, "w1", ForeignFinalizer)), nil},
	})
}

func TestLateDeliveryAfterTheReleaseIsAViolation(t *testing.T) {
	// Released at 12 after the delete answered at 11, gone at 13.
	widget := []any{heldThenReleased("w1"), delivery(10.5, 11, BindingDelete, "w1", "ok")}
	cm := []any{heldThenReleased("cm1"), delivery(10.5, 11, BindingStrictDelete, "cm1", "ok")}
	runChecks(t, []checkCase{
		{"a tick within 2s of the delete's answer", history(widget, delivery(12.9, 13, BindingTimer, "w1", "ok")), nil},
		{"a tick 2.5s after the delete's answer", history(widget, delivery(13.5, 13.6, BindingTimer, "w1", "ok")), []string{"late-delivery"}},
		{"a daemon started after the delete's answer", history(widget, delivery(15, 20, BindingDaemon, "w1", "ok")), []string{"late-delivery"}},
		{"two late ones make one violation", history(widget, delivery(14, 14.1, BindingTimer, "w1", "ok"),
			delivery(15, 15.1, BindingTimer, "w1", "ok")), []string{"late-delivery"}},
		{"a watch event after the release", history(widget, delivery(30, 30.1, BindingEvent, "w1", "ok")), nil},
		{"the delete redelivered after a lost ack, answered before the release", history(seen(1, "w1", hold),
			seenDeleting(10, "w1", hold), delivery(10.1, 10.2, BindingDelete, "w1", "ok"),
			delivery(14, 14.1, BindingDelete, "w1", "ok"), seenDeleting(14.5, "w1"), seenGone(15, "w1")), nil},
		{"the delete delivered again by a new leader after the release, the object still deleting", history(seen(1, "w1", hold),
			op(10, OpDelete, "w1"), seenDeleting(10, "w1", hold), delivery(10.5, 11, BindingDelete, "w1", "ok"), seenDeleting(12, "w1"),
			delivery(20, 20.1, BindingDelete, "w1", "ok"), seenGone(25, "w1")), nil},
		{"a delete long after gone", history(widget, delivery(16, 16.1, BindingDelete, "w1", "ok")), []string{"late-delivery"}},
		{"a daemon started 2.5s after gone, the broker's link slowed until then", history(widget,
			Fault{At: at(12), Healed: at(15.2), Kind: FaultNetLatency, Target: "broker-a->apiserver"}, delivery(15.5, 15.6, BindingDaemon, "w1", "ok")), nil},
		{"a daemon started 2.5s after the slowed link was healed", history(widget,
			Fault{At: at(9), Healed: at(12), Kind: FaultNetLatency, Target: "broker-a->apiserver"}, delivery(14.5, 14.6, BindingDaemon, "w1", "ok")), []string{"late-delivery"}},
		{"a daemon started 2.5s after gone, the API server restarting until then", history(widget,
			Fault{At: at(12), Healed: at(15.2), Kind: FaultAPIRestart, Target: "kube-apiserver"}, delivery(15.5, 15.6, BindingDaemon, "w1", "ok")), nil},
		{"a daemon started 2.5s after gone, etcd restarting until then", history(widget,
			Fault{At: at(12), Healed: at(15.2), Kind: FaultEtcdRestart, Target: "etcd"}, delivery(15.5, 15.6, BindingDaemon, "w1", "ok")), nil},
		{"a daemon started 2.5s after gone, etcd compacted and the watch caches relisting until then", history(widget,
			Fault{At: at(12), Healed: at(15.2), Kind: FaultEtcdCompact, Target: "etcd"}, delivery(15.5, 15.6, BindingDaemon, "w1", "ok")), nil},
		{"a daemon started 2.5s after the etcd restart was healed", history(widget,
			Fault{At: at(9), Healed: at(12), Kind: FaultEtcdRestart, Target: "etcd"}, delivery(14.5, 14.6, BindingDaemon, "w1", "ok")), []string{"late-delivery"}},
		{"a daemon started 2.5s after gone, only the handlers' link slowed", history(widget,
			Fault{At: at(12), Healed: at(15.2), Kind: FaultNetLatency, Target: "handlers->broker-a"}, delivery(15.5, 15.6, BindingDaemon, "w1", "ok")), []string{"late-delivery"}},
		{"a tick soon after gone, released with no ack", history(seen(1, "w1", hold), seenGone(12, "w1"),
			event(11, "w1", "HoldReleased", "(rule 3c)"), delivery(13.9, 14, BindingTimer, "w1", "ok")), nil},
		{"a tick long after gone, released with no ack", history(seen(1, "w1", hold), seenGone(12, "w1"),
			event(11, "w1", "HoldReleased", "(rule 3c)"), delivery(14.5, 14.6, BindingTimer, "w1", "ok")), []string{"late-delivery"}},
		{"a NONE tick 2.5s after gone", history(cm, delivery(15.5, 15.6, BindingNoneTimer, "cm1", "ok")), nil},
		{"a NONE tick 3.5s after gone", history(cm, delivery(16.5, 16.6, BindingNoneTimer, "cm1", "ok")), []string{"late-delivery"}},
		{"a NONE tick 3.5s after gone, seen gone twice", history(cm, seenGone(20, "cm1"),
			delivery(16.5, 16.6, BindingNoneTimer, "cm1", "ok")), []string{"late-delivery"}},
		{"a strict delete 3s after gone", history(cm, delivery(16, 16.1, BindingStrictDelete, "cm1", "ok")), []string{"late-delivery"}},
		{"ticks of an object never released", history(seen(1, "w1", hold), delivery(500, 500.1, BindingTimer, "w1", "ok")), nil},
	})
}

func TestBrokerPanicAndLeakAreViolations(t *testing.T) {
	const mib = 1 << 20
	runChecks(t, []checkCase{
		{"a panic", history(BrokerReport{Name: "broker-a", Panics: []string{"panic: runtime error"}}), []string{"broker-panic"}},
		{"no panic", history(BrokerReport{Name: "broker-a", FirstGoroutines: 50, LastGoroutines: 60}), nil},
		{"goroutines past twice and 100", history(BrokerReport{Name: "broker-a", FirstGoroutines: 50, LastGoroutines: 201}), []string{"leak"}},
		{"goroutines at twice and 100", history(BrokerReport{Name: "broker-a", FirstGoroutines: 50, LastGoroutines: 200}), nil},
		{"memory past twice and 256 MiB", history(BrokerReport{Name: "broker-a", FirstRSS: 100 * mib, LastRSS: 457 * mib}), []string{"leak"}},
		{"memory at twice and 256 MiB", history(BrokerReport{Name: "broker-a", FirstRSS: 100 * mib, LastRSS: 456 * mib}), nil},
		{"not sampled once warm", history(BrokerReport{Name: "broker-a", LastGoroutines: 5000, LastRSS: 1 << 40}), nil},
	})
}

func TestDuplicatesAreCountedButAreNoViolation(t *testing.T) {
	h := history(deletedWidget("w1", 1),
		delivery(1.3, 1.4, BindingCreate, "w1", "ok"), // the create again: a duplicate
		delivery(2, 2.1, BindingUpdate, "w1", "retry"), delivery(2.2, 2.3, BindingUpdate, "w1", "ok"),
		delivery(3, 3.1, BindingTimer, "w1", "ok"), delivery(4, 4.1, BindingTimer, "w1", "ok"),
		Fault{At: at(3), Kind: FaultHandlerKill, Target: "handler-1"}, Fault{At: at(4), Kind: FaultNetReset, Target: "broker->apiserver"},
		Fault{At: at(5), Kind: FaultNetReset, Target: "handler-2->broker"})
	if vs := Check(h); len(vs) != 0 {
		t.Errorf("violations: %v", vs)
	}
	st := Summarize(h)
	if st.Duplicates != 1 {
		t.Errorf("duplicates: got %d, want 1", st.Duplicates)
	}
	wantKinds := map[string]int{"create": 2, "update": 2, "delete": 1, "tick": 2}
	if st.Deliveries != 7 || !reflect.DeepEqual(st.DeliveriesByKind, wantKinds) {
		t.Errorf("deliveries: got %d %v, want 7 %v", st.Deliveries, st.DeliveriesByKind, wantKinds)
	}
	wantFaults := map[FaultKind]int{FaultHandlerKill: 1, FaultNetReset: 2}
	if st.Faults != 3 || !reflect.DeepEqual(st.FaultsByKind, wantFaults) || st.ObjectsCreated != 1 {
		t.Errorf("faults %d %v, objects created %d; want 3 %v, 1", st.Faults, st.FaultsByKind, st.ObjectsCreated, wantFaults)
	}
}

func TestReleaseLatencyGoesToTheLastFaultBeforeTheDelete(t *testing.T) {
	gone := func(uid string, del, gone float64) []any {
		return []any{op(del, OpDelete, uid), seenGone(gone, uid)}
	}
	h := history(
		Fault{At: at(100), Kind: FaultHandlerKill}, Fault{At: at(105), Kind: FaultNetBlackhole, Healed: at(130)},
		gone("a", 110, 112),                            // 5 s after the blackhole
		gone("b", 120, 130),                            // the same
		gone("c", 140, 141),                            // 35 s after it: none
		gone("d", 90, 90.5),                            // before any fault
		gone("e", 95, 94.5),                            // seen gone before its delete returned
		gone("f", 200, 150),                            // seen gone long before: no latency
		op(300, OpDelete, "g"), seenDeleting(301, "g"), // never gone
		refused(op(400, OpDelete, "h")), seenGone(401, "h"), // never deleted by the load
	)
	got := Summarize(h).ReleaseLatency
	want := map[FaultKind]Latency{
		FaultNetBlackhole: {N: 2, P50: 2 * time.Second, P99: 10 * time.Second},
		NoFault:           {N: 3, P50: 500 * time.Millisecond, P99: time.Second},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestCheckAttachesTheFaultsAroundAViolation(t *testing.T) {
	h := history(heldThenReleased("w1"), // released at 12
		Fault{At: at(-40), Kind: FaultHandlerKill, Target: "too-early"},
		Fault{At: at(-100), Healed: at(-10), Kind: FaultNetBlackhole, Target: "under-way"},
		Fault{At: at(-100), Healed: at(-20), Kind: FaultNetBlackhole, Target: "healed-before"},
		Fault{At: at(5), Kind: FaultHandlerKill, Target: "just-before"},
		Fault{At: at(12), Kind: FaultLeaderKill, Target: "at-the-release"},
		Fault{At: at(12.5), Kind: FaultHandlerStop, Target: "after"},
	)
	vs := Check(h)
	if len(vs) != 1 {
		t.Fatalf("want one violation, got %v", vs)
	}
	var got []string
	for _, f := range vs[0].Faults {
		got = append(got, f.Target)
	}
	if want := []string{"under-way", "just-before", "at-the-release"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestCheckAndStatsDoNotChangeTheHistory(t *testing.T) {
	parts := []any{heldThenReleased("w1"), seen(0.5, "w1", hold), seenGone(3, "w2"), seen(2, "w2", hold, ForeignFinalizer),
		Fault{At: at(9), Kind: FaultHandlerKill}, Fault{At: at(2), Kind: FaultNetReset}, left("w3", 10, hold)}
	h := history(parts...)
	vs := Check(h)
	Summarize(h)
	if !reflect.DeepEqual(h, history(parts...)) {
		t.Error("Check or Summarize changed the history")
	}
	// Given out of order, the observations are still read in time order.
	var got []string
	for _, v := range vs {
		got = append(got, v.Check+" "+v.UID)
	}
	// By rule, then time: rule 3's stuck hold is judged at its deletion (10 s).
	if want := []string{"delete-skipped w2", "stuck-hold w3", "delete-skipped w1", "foreign-removed w2"}; !slices.Equal(got, want) {
		t.Errorf("got %v, want %v", got, want)
	}
}

func TestCheckCompletesOnAHundredThousandDeliveries(t *testing.T) {
	// 20,000 widgets, each created, ticked three times, deleted: 100,000
	// deliveries and 100,000 observations, all within the contract.
	var parts []any
	for i := range 20000 {
		uid, sec := fmt.Sprintf("w%d", i), float64(i)*0.025
		life := deletedWidget(uid, sec)
		life = append(life, seenDeleting(sec+5.1, uid, hold),
			delivery(sec+1, sec+1.01, BindingTimer, uid, "ok"), delivery(sec+2, sec+2.01, BindingTimer, uid, "ok"),
			delivery(sec+3, sec+3.01, BindingTimer, uid, "ok"), seen(sec+3, uid, hold))
		parts = append(parts, life)
		if i%100 == 0 {
			parts = append(parts, Fault{At: at(sec), Kind: FaultNetLatency, Healed: at(sec + 40)})
		}
	}
	h := history(parts...)
	if len(h.Deliveries) != 100000 || len(h.Observations) != 100000 {
		t.Fatalf("built %d deliveries and %d observations", len(h.Deliveries), len(h.Observations))
	}
	if vs := Check(h); len(vs) != 0 {
		t.Errorf("%d violations, the first: %v", len(vs), vs[0])
	}
	if st := Summarize(h); st.ObjectsCreated != 20000 || st.ReleaseLatency[FaultNetLatency].N != 20000 {
		t.Errorf("stats: %+v", st)
	}
}

func TestViolationStringNamesTheRuleTheObjectAndTheDetail(t *testing.T) {
	v := Violation{Rule: 3, Check: "delete-skipped", Resource: Widgets, Namespace: "load", Name: "w", UID: "u1", At: at(72.25), Detail: "no ack"}
	if got, want := v.String(), "rule 3 delete-skipped: widgets load/w uid u1 at 12:01:12.250: no ack"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	b := Violation{Rule: 7, Check: "leak", Resource: "broker", Name: "broker-a", At: at(1), Detail: "d"}
	if got, want := b.String(), "rule 7 leak: broker broker-a at 12:00:01.000: d"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
