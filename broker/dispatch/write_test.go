package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/broker/resource"
)

// TestLostRaceIsToldFromARefusal sorts the API server's answers to a
// guarded JSON patch: what the object's moving explains is retried on its
// next state, what its content explains is a refusal.
func TestLostRaceIsToldFromARefusal(t *testing.T) {
	widgets := schema.GroupResource{Group: "test.tether.dev", Resource: "widgets"}
	for _, tc := range []struct {
		name      string
		err       error
		lost, ref bool
	}{
		{"409 conflict", apierrors.NewConflict(widgets, "w", errors.New("modified")), true, false},
		// What kube-apiserver 1.37 answers to a failed `test` (measured by
		// TestLostRaceIsWrittenOnTheNextState): a bare 422.
		{"bare 422 of a failed patch op", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", "", 0, false), true, false},
		{"422 that names the object", apierrors.NewInvalid(schema.GroupKind{Group: "test.tether.dev", Kind: "Widget"}, "w",
			field.ErrorList{field.Invalid(field.NewPath("metadata", "labels"), "bad value!", "must be a valid label")}), false, true},
		{"403 from a policy", apierrors.NewForbidden(widgets, "w", errors.New("denied by policy")), false, true},
		{"413 too large", apierrors.NewRequestEntityTooLargeError("limit is 3145728"), false, true},
		{"wrapped bare 422", fmt.Errorf("writing: %w", apierrors.NewGenericServerResponse(http.StatusUnprocessableEntity, "patch", schema.GroupResource{}, "", "", 0, false)), true, false},
		{"a timeout", apierrors.NewServerTimeout(widgets, "patch", 1), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := lostRace(tc.err); got != tc.lost {
				t.Errorf("lostRace = %v, want %v", got, tc.lost)
			}
			if got := !lostRace(tc.err) && refused(tc.err); got != tc.ref {
				t.Errorf("refused (and not a lost race) = %v, want %v", got, tc.ref)
			}
		})
	}
}

// TestRefusedHandlerPatchIsNotRecordedAsHandled: once the API server
// refuses the handler's patch, the write records the object as it is as
// handled, not what the patch would have made it.
func TestRefusedHandlerPatchIsNotRecordedAsHandled(t *testing.T) {
	obj := map[string]any{
		"apiVersion": "test.tether.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w"},
		"spec":     map[string]any{"size": int64(1)},
	}
	w := &write{handlerPatch: map[string]any{"metadata": map[string]any{"labels": map[string]any{"denied": "yes"}}}}
	if err := w.recordHandled("h", obj); err != nil {
		t.Fatal(err)
	}
	if progress.Equal(w.lastHandled, progress.Essence(obj)) {
		t.Fatalf("with the handler's patch, the recorded state should carry its label: %v", w.lastHandled)
	}
	if err := w.dropHandlerPart("h"); err != nil {
		t.Fatal(err)
	}
	if len(w.handlerPatch) != 0 {
		t.Errorf("the handler's patch is still in the write: %v", w.handlerPatch)
	}
	if !progress.Equal(w.lastHandled, progress.Essence(obj)) {
		t.Errorf("recorded as handled: %v, want the object as it is: %v", w.lastHandled, progress.Essence(obj))
	}
	want, err := progress.Encode(progress.Essence(obj))
	if err != nil {
		t.Fatal(err)
	}
	anns, _ := w.merge["metadata"].(map[string]any)["annotations"].(map[string]any)
	if got := anns[progress.LastHandledKey("h")]; got != want {
		t.Errorf("last-handled annotation = %v, want %s", got, want)
	}
}

// TestNoHoldBeforeTheHandlersLeaseRecordsIt: a write that adds a hold
// waits, pending and without a request, until the handler's Lease records
// it; a broker that died between the two would leave a hold no record
// leads the next broker to (TestReleaseCommandWithBrokerDown saw it).
func TestNoHoldBeforeTheHandlersLeaseRecordsIt(t *testing.T) {
	widgets := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}}
	obj := widget("1")
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
		map[schema.GroupVersionResource]string{widgets.GroupVersionResource: "WidgetList"}, obj.DeepCopy())
	var recorded atomic.Bool
	ow := &objectWriter{handlerName: "h", mu: &sync.Mutex{}, recorded: recorded.Load,
		opts: &Options{Client: client, WriteLimiter: NewWriteLimiter(1000, 1000), Clock: clock.RealClock{}}}
	o := &object{work: &objectWork{}, uid: "x", res: &widgets, cur: cached(t, obj)}

	wait, err := ow.apply(context.Background(), o, &write{addHold: true})
	if err != nil || wait <= 0 || o.work.pending == nil {
		t.Fatalf("before the record: wait %v, err %v, pending %v; want a wait and the write pending", wait, err, o.work.pending)
	}
	if n := len(client.Actions()); n != 0 {
		t.Fatalf("%d requests before the record, want none: %v", n, client.Actions())
	}

	recorded.Store(true)
	if wait, err := ow.apply(context.Background(), o, o.work.pending); err != nil || wait != 0 {
		t.Fatalf("after the record: wait %v, err %v", wait, err)
	}
	got, err := client.Resource(widgets.GroupVersionResource).Namespace("ns").Get(context.Background(), "w", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !hold.Has(got, "h") {
		t.Errorf("after the record, finalizers %v, want the hold", got.GetFinalizers())
	}
}

// TestStatusWrittenWithTheObjectSurvivesAnotherTry: for a resource without
// a status subresource the handler's status goes in the object's patch, and
// it must still be there when that patch is sent again: after waiting for
// its turn, or on the next state after a lost race.
func TestStatusWrittenWithTheObjectSurvivesAnotherTry(t *testing.T) {
	widgets := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}}
	waitForTurn := func(ow *objectWriter, _ *dynamicfake.FakeDynamicClient) {
		ow.turn(&object{work: &objectWork{}}) // another object's write takes the turn of now
		ow.inFlight.done(time.Millisecond)
	}
	for _, tc := range []struct {
		name string
		// first sets up what makes the first try not land.
		first func(ow *objectWriter, client *dynamicfake.FakeDynamicClient)
		// moved: the object has a newer state when the write comes back,
		// so the write is built again rather than sent as built.
		moved bool
	}{
		{"after waiting for its turn", waitForTurn, false},
		{"after waiting for its turn, on a newer state", waitForTurn, true},
		{"after a lost race", func(_ *objectWriter, client *dynamicfake.FakeDynamicClient) {
			var once atomic.Bool
			client.PrependReactor("patch", "widgets", func(k8stesting.Action) (bool, kruntime.Object, error) {
				if once.CompareAndSwap(false, true) {
					return true, nil, apierrors.NewConflict(widgets.GroupResource(), "w", errors.New("modified"))
				}
				return false, nil, nil
			})
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := widget("1")
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
				map[schema.GroupVersionResource]string{widgets.GroupVersionResource: "WidgetList"}, obj.DeepCopy())
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
			ow := &objectWriter{handlerName: "h", mu: &sync.Mutex{},
				opts: &Options{Client: client, WriteLimiter: NewWriteLimiter(1, 1), Clock: clk}}
			tc.first(ow, client)
			o := &object{work: &objectWork{}, uid: "x", res: &widgets, cur: cached(t, obj)}

			w := &write{status: map[string]any{"phase": "Ready"}}
			wait, err := ow.apply(context.Background(), o, w)
			if o.work.pending == nil || (err == nil && wait == 0) {
				t.Fatalf("first try: wait %v, err %v, pending %v; want it not landed and pending", wait, err, o.work.pending)
			}
			if tc.moved {
				newer := widget("2")
				newer.SetLabels(map[string]string{"moved": "yes"})
				if _, err := client.Resource(widgets.GroupVersionResource).Namespace("ns").Update(context.Background(), newer, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				o.cur, o.view = cached(t, newer), nil
			}
			// Tried again in its turns, it lands.
			for try := 2; wait > 0 || err != nil; try++ {
				if try > 3 {
					t.Fatalf("try %d: wait %v, err %v", try, wait, err)
				}
				clk.Step(wait)
				wait, err = ow.apply(context.Background(), o, o.work.pending)
			}
			got, err := client.Resource(widgets.GroupVersionResource).Namespace("ns").Get(context.Background(), "w", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if phase, _, _ := unstructured.NestedString(got.Object, "status", "phase"); phase != "Ready" {
				t.Errorf("status after the second try: %v, want phase Ready", got.Object["status"])
			}
		})
	}
}

// TestWriteThatWaitedIsSentAsBuiltWhileItsObjectStaysTheSame: a write that
// came back for its turn on the state it was built against is sent as it
// was, without decoding the object again; on a newer state it is built
// again, guarded by that state's resourceVersion.
func TestWriteThatWaitedIsSentAsBuiltWhileItsObjectStaysTheSame(t *testing.T) {
	widgets := resource.Resource{GroupVersionResource: schema.GroupVersionResource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}}
	for _, tc := range []struct {
		name        string
		rv          string // of the state the write comes back on
		wantDecoded bool
	}{
		{"the same state", "1", false},
		{"a newer state", "2", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(kruntime.NewScheme(),
				map[schema.GroupVersionResource]string{widgets.GroupVersionResource: "WidgetList"})
			var sent [][]byte
			client.PrependReactor("patch", "widgets", func(a k8stesting.Action) (bool, kruntime.Object, error) {
				sent = append(sent, a.(k8stesting.PatchAction).GetPatch())
				return true, widget("3"), nil
			})
			clk := clocktesting.NewFakeClock(time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC))
			ow := &objectWriter{handlerName: "h", mu: &sync.Mutex{},
				opts: &Options{Client: client, WriteLimiter: NewWriteLimiter(1, 1), Clock: clk}}
			ow.turn(&object{work: &objectWork{}}) // another object's write takes the turn of now
			ow.inFlight.done(time.Millisecond)
			o := &object{work: &objectWork{}, uid: "x", res: &widgets, cur: cached(t, widget("1"))}
			wait, err := ow.apply(context.Background(), o, &write{addHold: true})
			if err != nil || wait == 0 || len(sent) != 0 {
				t.Fatalf("first try: wait %v, err %v, %d requests; want a wait and none", wait, err, len(sent))
			}

			// The next pass: a fresh cur of the latest state, not decoded yet.
			o.cur, o.view = cached(t, widget(tc.rv)), nil
			clk.Step(wait)
			if wait, err := ow.apply(context.Background(), o, o.work.pending); err != nil || wait != 0 {
				t.Fatalf("second try: wait %v, err %v", wait, err)
			}
			if decoded := o.view != nil; decoded != tc.wantDecoded {
				t.Errorf("object decoded for the second try: %v, want %v", decoded, tc.wantDecoded)
			}
			if len(sent) != 1 {
				t.Fatalf("%d requests, want 1", len(sent))
			}
			guard := fmt.Sprintf(`{"op":"test","path":"/metadata/resourceVersion","value":%q}`, tc.rv)
			if !strings.Contains(string(sent[0]), guard) {
				t.Errorf("patch sent: %s; want it guarded by %s", sent[0], guard)
			}
		})
	}
}

// widget is Widget ns/w of UID x at resourceVersion rv.
func widget(rv string) *unstructured.Unstructured {
	obj := &unstructured.Unstructured{}
	obj.SetAPIVersion("test.tether.dev/v1")
	obj.SetKind("Widget")
	obj.SetNamespace("ns")
	obj.SetName("w")
	obj.SetUID("x")
	obj.SetResourceVersion(rv)
	return obj
}

// cached is obj as the informer caches it.
func cached(t *testing.T, obj *unstructured.Unstructured) *informer.Object {
	t.Helper()
	c, err := informer.Encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
