package sdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"
	evanphx "gopkg.in/evanphx/json-patch.v4"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

var secrets = sdk.GVR("", "v1", "secrets")

func allow(context.Context, *sdk.Review) error { return nil }

const (
	// reviewedSecret is the object of the reviews below.
	reviewedSecret = `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s1","namespace":"default","uid":"obj-uid",` +
		`"labels":{"app":"web"},"annotations":{"example.com/owner":"team-a"}},"type":"Opaque",` +
		`"data":{"password":"c2VjcmV0","token":"dG9rZW4="}}`
	reviewedOldSecret = `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s1","namespace":"default","uid":"obj-uid"},` +
		`"type":"Opaque","data":{"password":"b2xk"}}`
)

// review builds an ADMISSION delivery: a CREATE of reviewedSecret for
// binding "validate-0".
func review(id string, mods ...func(*tetherv1.Delivery)) *tetherv1.Delivery {
	d := &tetherv1.Delivery{
		Id:        id,
		BindingId: "validate-0",
		Kind:      tetherv1.DeliveryKind_DELIVERY_KIND_ADMISSION,
		Attempt:   1,
		Ref: &tetherv1.ObjectRef{
			Resource:  &tetherv1.Resource{Version: "v1", Resource: "secrets", Kind: "Secret", Namespaced: true},
			Namespace: "default",
			Name:      "s1",
		},
		Object:   []byte(reviewedSecret),
		Deadline: timestamppb.New(time.Now().Add(time.Hour)),
		Admission: &tetherv1.AdmissionRequest{
			Uid:        "review-" + id,
			Operation:  tetherv1.AdmissionOperation_ADMISSION_OPERATION_CREATE,
			UserName:   "alice",
			UserGroups: []string{"devs", "system:authenticated"},
			Request:    []byte(`{"uid":"review-` + id + `","operation":"CREATE","namespace":"default","name":"s1"}`),
		},
	}
	for _, m := range mods {
		m(d)
	}
	return d
}

func asMutate(d *tetherv1.Delivery) { d.BindingId = "mutate-0" }

// reviewOne runs fn as the handler's only binding, a validate binding
// unless mutate, for one delivery and returns the ack.
func reviewOne(t *testing.T, mutate bool, fn sdk.AdmissionFunc, d *tetherv1.Delivery) *tetherv1.Ack {
	t.Helper()
	hs := newHarness(t, nil)
	h := sdk.New("secret-policy", hs.options()...)
	if mutate {
		h.OnMutate(secrets, fn)
	} else {
		h.OnValidate(secrets, fn)
	}
	hs.run(h)
	s := hs.session()
	s.deliver(t, d)
	return s.ack(t)
}

func TestReviewIsAnsweredWithWhatTheFunctionReturned(t *testing.T) {
	tests := []struct {
		name     string
		mutate   bool
		fn       sdk.AdmissionFunc
		want     *tetherv1.AdmissionResponse // nil: FAIL
		failWith string
	}{{
		name: "nil allows",
		fn:   allow,
		want: &tetherv1.AdmissionResponse{Allowed: true},
	}, {
		name: "Deny refuses with the message",
		fn:   func(context.Context, *sdk.Review) error { return sdk.Deny("example.com/owner is required") },
		want: &tetherv1.AdmissionResponse{Message: "example.com/owner is required"},
	}, {
		name: "DenyWithCode sets the status code",
		fn:   func(context.Context, *sdk.Review) error { return sdk.DenyWithCode(422, "data.password is too short") },
		want: &tetherv1.AdmissionResponse{Message: "data.password is too short", Code: 422},
	}, {
		name: "a wrapped denial refuses with the whole message",
		fn: func(context.Context, *sdk.Review) error {
			return fmt.Errorf("checking the owner: %w", sdk.DenyWithCode(409, "team-b owns s1"))
		},
		want: &tetherv1.AdmissionResponse{Message: "checking the owner: team-b owns s1", Code: 409},
	}, {
		name: "a code that is not an error status means the default",
		fn:   func(context.Context, *sdk.Review) error { return sdk.DenyWithCode(200, "no") },
		want: &tetherv1.AdmissionResponse{Message: "no"},
	}, {
		name: "a denial without message still says denied",
		fn:   func(context.Context, *sdk.Review) error { return sdk.Deny("") },
		want: &tetherv1.AdmissionResponse{Message: "denied"},
	}, {
		name: "warnings go with an allow",
		fn: func(_ context.Context, r *sdk.Review) error {
			r.Warn("token is deprecated")
			r.Warn(strings.Repeat("w", 2000))
			return nil
		},
		want: &tetherv1.AdmissionResponse{Allowed: true,
			Warnings: []string{"token is deprecated", strings.Repeat("w", 1021) + "…"}},
	}, {
		name: "warnings go with a denial",
		fn: func(_ context.Context, r *sdk.Review) error {
			r.Warn("first")
			return sdk.Deny("second")
		},
		want: &tetherv1.AdmissionResponse{Message: "second", Warnings: []string{"first"}},
	}, {
		name: "a validate function's changes are ignored",
		fn: func(_ context.Context, r *sdk.Review) error {
			r.Object.SetLabels(map[string]string{"changed": "yes"})
			return nil
		},
		want: &tetherv1.AdmissionResponse{Allowed: true},
	}, {
		name:   "a mutate function that changes nothing sends no patch",
		mutate: true,
		fn:     allow,
		want:   &tetherv1.AdmissionResponse{Allowed: true},
	}, {
		name:   "a mutate function that stores equal Go values sends no patch",
		mutate: true,
		fn: func(_ context.Context, r *sdk.Review) error {
			r.Object.Object["data"] = map[string]string{"password": "c2VjcmV0", "token": "dG9rZW4="}
			return nil
		},
		want: &tetherv1.AdmissionResponse{Allowed: true},
	}, {
		name:   "a denied mutation sends no patch",
		mutate: true,
		fn: func(_ context.Context, r *sdk.Review) error {
			r.Object.SetLabels(map[string]string{"changed": "yes"})
			return sdk.Deny("no")
		},
		want: &tetherv1.AdmissionResponse{Message: "no"},
	}, {
		name:     "an error fails",
		fn:       func(context.Context, *sdk.Review) error { return errors.New("policy store unreachable") },
		failWith: "policy store unreachable",
	}, {
		name:     "RetryAfter fails: a review is not retried",
		fn:       func(context.Context, *sdk.Review) error { return sdk.RetryAfter(errors.New("busy"), time.Second) },
		failWith: "busy",
	}, {
		name: "a panic fails and does not crash",
		fn: func(_ context.Context, r *sdk.Review) error {
			r.Warn("dropped")
			var m map[string]int
			m["x"]++
			return nil
		},
		failWith: "panic: assignment to entry in nil map",
	}, {
		name:     "a mutate function that removes the object fails",
		mutate:   true,
		fn:       func(_ context.Context, r *sdk.Review) error { r.Object = nil; return nil },
		failWith: "removed Review.Object",
	}, {
		name:   "a mutation JSON cannot carry fails",
		mutate: true,
		fn: func(_ context.Context, r *sdk.Review) error {
			r.Object.Object["spec"] = make(chan int)
			return nil
		},
		failWith: "encoding the mutated object",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := review("d1")
			if tt.mutate {
				asMutate(d)
			}
			ack := reviewOne(t, tt.mutate, tt.fn, d)
			if ack.GetDeliveryId() != "d1" {
				t.Errorf("ack for %q, want d1", ack.GetDeliveryId())
			}
			if tt.want == nil {
				if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || ack.Admission != nil ||
					!strings.Contains(ack.GetMessage(), tt.failWith) {
					t.Fatalf("ack = %v, want FAIL without an answer, with a message containing %q", ack, tt.failWith)
				}
				return
			}
			if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || ack.GetMessage() != "" {
				t.Fatalf("ack = %v, want OK", ack)
			}
			if !proto.Equal(ack.GetAdmission(), tt.want) {
				t.Errorf("answer:\ngot  %s\nwant %s", prototext.Format(ack.GetAdmission()), prototext.Format(tt.want))
			}
		})
	}
}

func TestMutationIsAnsweredWithAPatchThatRebuildsTheChangedObject(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(r *sdk.Review)
	}{{
		name: "labels and annotations, with slashes and tildes",
		mutate: func(r *sdk.Review) {
			r.Object.SetLabels(map[string]string{"app": "web", "example.com/owner": "team-a"})
			r.Object.SetAnnotations(map[string]string{"example.com/owner": "team-b", "a~b": "c"})
		},
	}, {
		name: "a key removed and a section added with plain Go values",
		mutate: func(r *sdk.Review) {
			delete(r.Object.Object["data"].(map[string]any), "token")
			r.Object.Object["spec"] = map[string]any{"replicas": 3, "ports": []int{80, 443}, "paused": false}
		},
	}, {
		name: "type changes and an array",
		mutate: func(r *sdk.Review) {
			r.Object.Object["type"] = map[string]any{"kind": "Opaque"}
			r.Object.Object["data"] = []any{"a", "b"}
			r.Object.SetFinalizers([]string{"example.com/keep"})
		},
	}, {
		name:   "a whole new object",
		mutate: func(r *sdk.Review) { r.Object.Object = map[string]any{"apiVersion": "v1", "kind": "Secret"} },
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			changed := make(chan []byte, 1)
			ack := reviewOne(t, true, func(_ context.Context, r *sdk.Review) error {
				tt.mutate(r)
				raw, err := json.Marshal(r.Object.Object)
				changed <- raw
				return err
			}, review("d1", asMutate))
			if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK || !ack.GetAdmission().GetAllowed() {
				t.Fatalf("ack = %v, want OK and allowed", ack)
			}
			want := recv(t, changed, "the changed object")
			patch, err := evanphx.DecodePatch(ack.GetAdmission().GetPatch())
			if err != nil {
				t.Fatalf("patch %s is not a JSON patch: %v", ack.GetAdmission().GetPatch(), err)
			}
			got, err := patch.Apply([]byte(reviewedSecret))
			if err != nil {
				t.Fatalf("patch %s does not apply to the original: %v", ack.GetAdmission().GetPatch(), err)
			}
			jsonEqual(t, "patched original", got, string(want))
		})
	}
}

func TestReviewCarriesTheRequest(t *testing.T) {
	deadline := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	type seen struct {
		r        *sdk.Review
		deadline time.Time
	}
	tests := []struct {
		name      string
		mod       func(*tetherv1.Delivery)
		op        sdk.Operation
		object    bool
		oldObject bool
	}{
		{name: "create", mod: func(*tetherv1.Delivery) {}, op: sdk.OpCreate, object: true},
		{name: "update", op: sdk.OpUpdate, object: true, oldObject: true, mod: func(d *tetherv1.Delivery) {
			d.Admission.Operation = tetherv1.AdmissionOperation_ADMISSION_OPERATION_UPDATE
			d.OldObject = []byte(reviewedOldSecret)
		}},
		{name: "delete", op: sdk.OpDelete, oldObject: true, mod: func(d *tetherv1.Delivery) {
			d.Admission.Operation = tetherv1.AdmissionOperation_ADMISSION_OPERATION_DELETE
			d.Object, d.OldObject = nil, []byte(reviewedOldSecret)
		}},
		{name: "connect with null object", op: sdk.OpConnect, mod: func(d *tetherv1.Delivery) {
			d.Admission.Operation = tetherv1.AdmissionOperation_ADMISSION_OPERATION_CONNECT
			d.Object = []byte("null")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := make(chan seen, 1)
			d := review("d7", tt.mod, func(d *tetherv1.Delivery) {
				d.Deadline = timestamppb.New(deadline)
				d.Admission.SubResource = "status"
				d.Admission.DryRun = true
			})
			ack := reviewOne(t, false, func(ctx context.Context, r *sdk.Review) error {
				dl, _ := ctx.Deadline()
				got <- seen{r, dl}
				return nil
			}, d)
			if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
				t.Fatalf("ack = %v", ack)
			}
			s := recv(t, got, "the review")
			r := s.r
			if !s.deadline.Equal(deadline) {
				t.Errorf("ctx deadline = %s, want %s", s.deadline, deadline)
			}
			if r.Binding != "validate-0" || r.UID != "review-d7" || r.Operation != tt.op || r.SubResource != "status" || !r.DryRun {
				t.Errorf("review header = %q %q %q %q %v", r.Binding, r.UID, r.Operation, r.SubResource, r.DryRun)
			}
			if r.UserName != "alice" || !reflect.DeepEqual(r.UserGroups, []string{"devs", "system:authenticated"}) {
				t.Errorf("user = %q %v", r.UserName, r.UserGroups)
			}
			wantRes := sdk.Resource{Version: "v1", Resource: "secrets", Kind: "Secret"}
			if r.Resource != wantRes || r.Namespace != "default" || r.Name != "s1" {
				t.Errorf("review ref = %+v %q/%q", r.Resource, r.Namespace, r.Name)
			}
			if (r.Object != nil) != tt.object || (r.OldObject != nil) != tt.oldObject {
				t.Fatalf("object %v, old object %v; want present: %v, %v", r.Object, r.OldObject, tt.object, tt.oldObject)
			}
			if tt.object && r.Object.GetAnnotations()["example.com/owner"] != "team-a" {
				t.Errorf("object annotations = %v", r.Object.GetAnnotations())
			}
			if tt.oldObject && r.OldObject.Object["data"].(map[string]any)["password"] != "b2xk" {
				t.Errorf("old object = %v", r.OldObject.Object)
			}
			jsonEqual(t, "raw request", r.Raw, string(d.GetAdmission().GetRequest()))
			if r.Logger() == nil {
				t.Error("Logger() = nil")
			}
		})
	}
}

func TestCancelledReviewEndsTheFunctionsContext(t *testing.T) {
	hs := newHarness(t, nil)
	started := make(chan struct{})
	cause := make(chan error, 1)
	h := sdk.New("secret-policy", hs.options()...)
	h.OnValidate(secrets, func(ctx context.Context, r *sdk.Review) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	hs.run(h)
	s := hs.session()
	s.deliver(t, review("d1"))
	closedWithin(t, started, "the function to start")
	s.cancel(t, "d1", "webhook deadline passed")
	if err := recv(t, cause, "the function to see the cancellation"); !errors.Is(err, sdk.ErrCancelled) {
		t.Errorf("context cause = %v, want ErrCancelled", err)
	}
	if ack := s.ack(t); ack.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || ack.Admission != nil {
		t.Errorf("ack = %v, want FAIL without an answer", ack)
	}
}

func TestAdmissionBindingsTakeOnlyReviews(t *testing.T) {
	tests := []struct {
		name string
		d    *tetherv1.Delivery
		want string
	}{
		{name: "review for a create binding", d: review("d1", func(d *tetherv1.Delivery) { d.BindingId = "create-0" }),
			want: `binding "create-0" is a create binding; it does not take DELIVERY_KIND_ADMISSION deliveries`},
		{name: "create for a validate binding", d: delivery("d1", func(d *tetherv1.Delivery) { d.BindingId = "validate-0" }),
			want: `binding "validate-0" is a validate binding; it does not take DELIVERY_KIND_CREATE deliveries`},
		{name: "tick for a mutate binding", d: delivery("d1", func(d *tetherv1.Delivery) {
			d.BindingId, d.Kind = "mutate-0", tetherv1.DeliveryKind_DELIVERY_KIND_TICK
		}), want: `binding "mutate-0" is a mutate binding; it does not take DELIVERY_KIND_TICK deliveries`},
		{name: "review without request", d: review("d1", func(d *tetherv1.Delivery) { d.Admission = nil }),
			want: "malformed delivery: admission delivery without a review"},
		{name: "review with a malformed object", d: review("d1", func(d *tetherv1.Delivery) { d.Object = []byte(`{"a":`) }),
			want: "malformed delivery: object"},
		{name: "review with a malformed old object", d: review("d1", func(d *tetherv1.Delivery) { d.OldObject = []byte(`[]`) }),
			want: "malformed delivery: old object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := make(chan struct{}, 3)
			hs := newHarness(t, nil)
			h := sdk.New("secret-policy", hs.options()...)
			h.OnValidate(secrets, func(context.Context, *sdk.Review) error { called <- struct{}{}; return nil })
			h.OnMutate(secrets, func(context.Context, *sdk.Review) error { called <- struct{}{}; return nil })
			h.OnCreate(configMaps, func(context.Context, *sdk.Event) error { called <- struct{}{}; return nil })
			hs.run(h)
			s := hs.session()
			s.deliver(t, tt.d)
			ack := s.ack(t)
			if ack.GetOutcome() != tetherv1.Outcome_OUTCOME_FAIL || !strings.Contains(ack.GetMessage(), tt.want) {
				t.Fatalf("ack = %v, want FAIL containing %q", ack, tt.want)
			}
			select {
			case <-called:
				t.Error("a handler function was called")
			default:
			}
		})
	}
}
