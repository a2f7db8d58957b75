package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// The checks below judge made-up recordings, as the proxy would make them,
// of a handler that keeps the rule and of one that breaks it: each check
// can fail.

func TestAckOneFailsAnAckTwiceForADeliveryNotSentOrWithoutOutcome(t *testing.T) {
	d := func(id string) delivery { return delivery{d: &tetherv1.Delivery{Id: id}} }
	ack := func(id string) *tetherv1.Ack {
		return &tetherv1.Ack{DeliveryId: id, Outcome: tetherv1.Outcome_OUTCOME_OK}
	}
	keeps := &stream{deliveries: []delivery{d("a"), d("b")}, acks: map[string]ackAt{"a": {a: ack("a")}, "b": {a: ack("b")}}}
	twice := &stream{deliveries: []delivery{d("a")}, acks: map[string]ackAt{"a": {a: ack("a")}}, extraAcks: []*tetherv1.Ack{ack("a")}}
	unsent := &stream{acks: map[string]ackAt{}, extraAcks: []*tetherv1.Ack{ack("z")}}
	if err := oneAckEach([]*stream{keeps}); err != nil {
		t.Errorf("one ack each: %v", err)
	}
	noOutcome := &stream{deliveries: []delivery{d("a")}, acks: map[string]ackAt{"a": {a: &tetherv1.Ack{DeliveryId: "a"}}}}
	unoffered := &stream{deliveries: []delivery{d("a")}, acks: map[string]ackAt{"a": {a: ack("a")}}, unofferedBatches: 1}
	for name, s := range map[string]*stream{"acked twice": twice, "never sent": unsent, "no outcome": noOutcome,
		"a batch not offered": unoffered} {
		if err := oneAckEach([]*stream{keeps, s}); err == nil {
			t.Errorf("%s: passed", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	if unanswered(keeps) != nil {
		t.Error("every delivery answered, yet one is unanswered")
	}
	if left := (&stream{deliveries: []delivery{d("a"), d("b")}, acks: map[string]ackAt{"a": {a: ack("a")}}}); unanswered(left).d.GetId() != "b" {
		t.Error("b is not acked, yet not found unanswered")
	}
}

func TestReconnectBackoffJudgesTheDelays(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	tests := []struct {
		name  string
		gaps  []time.Duration
		reset time.Duration
		pass  bool
	}{
		{"the Go and TypeScript SDKs' steps", ms(400, 800, 1500, 1900), 300 * time.Millisecond, true},
		{"the Python SDK's steps", ms(80, 150, 300, 700), 90 * time.Millisecond, true},
		{"no delay at all", ms(0, 0, 0, 0), 0, false},
		{"a constant delay", ms(500, 500, 500, 500), 500 * time.Millisecond, false},
		{"not reset after a Welcome", ms(400, 800, 1500, 1900), 2 * time.Second, false},
		{"over the cap", ms(1000, 2000, 4000, 8000), 900 * time.Millisecond, false},
	}
	for _, tt := range tests {
		if err := backedOff(tt.gaps, tt.reset); (err == nil) != tt.pass {
			t.Errorf("%s: %v, want pass = %v", tt.name, err, tt.pass)
		}
	}
}

func TestInstanceIDIsStableThenNew(t *testing.T) {
	hello := func(id string) *stream { return &stream{hello: &tetherv1.Hello{InstanceId: id}} }
	refused := &stream{} // a stream the proxy refused before a Hello came
	tests := []struct {
		name          string
		first, second []*stream
		pass          bool
	}{
		{"stable, then another", []*stream{hello("a"), refused, hello("a")}, []*stream{hello("b")}, true},
		{"changed within the process", []*stream{hello("a"), hello("a2")}, []*stream{hello("b")}, false},
		{"the same in both processes", []*stream{hello("a")}, []*stream{hello("a")}, false},
		{"none", []*stream{hello("")}, []*stream{hello("b")}, false},
	}
	for _, tt := range tests {
		if err := sameThenOther(tt.first, tt.second); (err == nil) != tt.pass {
			t.Errorf("%s: %v, want pass = %v", tt.name, err, tt.pass)
		}
	}
}

func TestDaemonExitedIsFoundByUID(t *testing.T) {
	streams := []*stream{{exits: []*tetherv1.DaemonExited{{BindingId: "daemon", Uid: "u1"}}}}
	if daemonExit(streams, "u1") == nil || daemonExit(streams, "u2") != nil {
		t.Error("DaemonExited not matched by the object's UID")
	}
}

func TestDaemonSessionFailsADaemonThatBeatsPastTheBound(t *testing.T) {
	ended := time.Now()
	tests := []struct {
		name string
		last map[string]time.Time
		pass bool
	}{
		{"stopped with the stream", map[string]time.Time{"session-1": ended.Add(50 * time.Millisecond)}, true},
		{"stopped before the stream ended", map[string]time.Time{"session-1": ended.Add(-time.Second)}, true},
		{"never seen growing after the end", map[string]time.Time{"session-1": {}}, true},
		{"beating on past the bound", map[string]time.Time{"session-1": ended.Add(50 * time.Millisecond), "session-2": ended.Add(2500 * time.Millisecond)}, false},
		{"no run beat", map[string]time.Time{}, false},
	}
	for _, tt := range tests {
		if err := stoppedWithin(tt.last, ended, sessionBound); (err == nil) != tt.pass {
			t.Errorf("%s: %v, want pass = %v", tt.name, err, tt.pass)
		}
	}
}

func TestBeatsAreTheDaemonsNonEmptyFiles(t *testing.T) {
	dir := t.TempDir()
	for name, content := range map[string]string{"session-a": "beat\nbeat\n", "session-b": "", "other": "beat\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := beats(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["session-a"] != 10 {
		t.Errorf("beats = %v, want session-a of 10 bytes only", got)
	}
}

func TestCapUseFailsAnEventForABrokerWithoutHandlerEvents(t *testing.T) {
	ack := func(events int) *tetherv1.Ack {
		a := &tetherv1.Ack{DeliveryId: "d", Outcome: tetherv1.Outcome_OUTCOME_OK}
		for range events {
			a.Events = append(a.Events, &tetherv1.HandlerEvent{Type: tetherv1.HandlerEvent_TYPE_NORMAL, Reason: "Conformance"})
		}
		return a
	}
	full := []tetherv1.Capability{tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_HANDLER_EVENTS}
	withheld := without(full, tetherv1.Capability_CAPABILITY_HANDLER_EVENTS)
	if !lacksEvents(withheld) || lacksEvents(full) || lacksEvents(nil) {
		t.Fatalf("the Welcome the proxy makes lists %v, which must list capabilities without handler Events", withheld)
	}
	if err := judgeCapUse(full, ack(1), ack(0)); err != nil {
		t.Errorf("the Event dropped for the broker without handler Events: %v", err)
	}
	// Offered no capabilities at all (hidden), the handler may post it or not.
	if err := judgeCapUse(nil, ack(0), ack(0)); err != nil {
		t.Errorf("no capabilities offered, no Event posted: %v", err)
	}
	failed := &tetherv1.Ack{DeliveryId: "d", Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: "dropped"}
	for name, c := range map[string]struct{ with, without *tetherv1.Ack }{
		"Event kept for a broker without handler Events": {ack(1), ack(1)},
		"no Event though the broker takes them":          {ack(0), ack(0)},
		"acked FAIL without the capability":              {ack(1), failed},
	} {
		if err := judgeCapUse(full, c.with, c.without); err == nil {
			t.Errorf("%s: passed", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
}
