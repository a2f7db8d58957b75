package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestAHandlerEventIsCheckedAgainstTheProtocolLimits(t *testing.T) {
	about := corev1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm", UID: "u1"}
	other := &tetherv1.EventObject{ApiVersion: "apps/v1", Kind: "Deployment", Namespace: "other", Name: "d", Uid: "u2"}
	normal, warning := tetherv1.HandlerEvent_TYPE_NORMAL, tetherv1.HandlerEvent_TYPE_WARNING
	for _, tc := range []struct {
		name    string
		event   *tetherv1.HandlerEvent
		ref     corev1.ObjectReference
		typ     string
		message string
		refused bool
	}{
		{name: "about the delivery's object", event: &tetherv1.HandlerEvent{Type: normal, Reason: "Created", Message: "hi"}, ref: about, typ: "Normal", message: "hi"},
		{name: "about another object", event: &tetherv1.HandlerEvent{Type: warning, Reason: "Odd", Regarding: other}, ref: corev1.ObjectReference{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "other", Name: "d", UID: "u2"}, typ: "Warning"},
		{name: "a long message is cut", event: &tetherv1.HandlerEvent{Type: normal, Reason: "Long", Message: strings.Repeat("é", 1000)}, ref: about, typ: "Normal", message: strings.Repeat("é", 510) + "…"},
		{name: "no type", event: &tetherv1.HandlerEvent{Reason: "X"}, refused: true},
		{name: "no reason", event: &tetherv1.HandlerEvent{Type: normal}, refused: true},
		{name: "a reason too long", event: &tetherv1.HandlerEvent{Type: normal, Reason: strings.Repeat("R", tetherv1.MaxEventReasonBytes+1)}, refused: true},
		{name: "a regarding object without a name", event: &tetherv1.HandlerEvent{Type: normal, Reason: "X", Regarding: &tetherv1.EventObject{ApiVersion: "v1", Kind: "Pod"}}, refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ref, typ, reason, message, err := handlerEvent(tc.event, about)
			if tc.refused {
				if err == nil {
					t.Fatalf("got no error, want the event refused")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ref != tc.ref || typ != tc.typ || reason != tc.event.GetReason() || message != tc.message {
				t.Errorf("got %+v %q %q %q", ref, typ, reason, message)
			}
			if len(message) > tetherv1.MaxEventMessageBytes {
				t.Errorf("message is %d bytes", len(message))
			}
		})
	}
}

func TestHandlerEventRecordersAreBoundedLeastRecentlyUsedFirst(t *testing.T) {
	h, stop := newHandlerEvents(&rest.Config{Host: "http://127.0.0.1:1"}, true, hclog.NewNullLogger())
	defer stop()
	as := func(i int) *authenticationv1.UserInfo {
		return &authenticationv1.UserInfo{Username: fmt.Sprintf("system:serviceaccount:ns:sa%d", i)}
	}
	for i := range maxHandlerRecorders {
		if _, err := h.recorder("h", as(i)); err != nil {
			t.Fatal(err)
		}
	}
	first, err := h.recorder("h", as(0)) // used again: now the second is the oldest
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.recorder("h", as(maxHandlerRecorders)); err != nil {
		t.Fatal(err)
	}
	if len(h.recs) != maxHandlerRecorders {
		t.Fatalf("%d recorders kept, want %d", len(h.recs), maxHandlerRecorders)
	}
	if again, _ := h.recorder("h", as(0)); again != first {
		t.Errorf("the recorder used most recently was evicted")
	}
	if _, ok := h.recs["h\x00"+identityKey(impersonation(*as(1)))]; ok {
		t.Errorf("the least recently used recorder was kept")
	}
	if _, err := h.recorder("h", nil); err == nil {
		t.Errorf("an instance without an identity got a recorder")
	}
}
