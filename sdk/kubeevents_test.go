package sdk_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
)

func TestRecordedEventsGoInTheAck(t *testing.T) {
	normal, warning := tetherv1.HandlerEvent_TYPE_NORMAL, tetherv1.HandlerEvent_TYPE_WARNING
	child := sdk.ObjectRef{APIVersion: "v1", Kind: "Pod", Namespace: "other", Name: "p", UID: "u2"}
	tests := []struct {
		name    string
		fn      sdk.Func
		outcome tetherv1.Outcome
		want    []*tetherv1.HandlerEvent
	}{
		{name: "about the delivery's object and another",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.Record(sdk.Normal, "Created", "made it")
				ev.RecordAbout(child, sdk.Warning, "Odd", "")
				return nil
			},
			outcome: tetherv1.Outcome_OUTCOME_OK,
			want: []*tetherv1.HandlerEvent{{Type: normal, Reason: "Created", Message: "made it"},
				{Type: warning, Reason: "Odd", Regarding: &tetherv1.EventObject{ApiVersion: "v1", Kind: "Pod", Namespace: "other", Name: "p", Uid: "u2"}}}},
		{name: "with a failure",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.Record(sdk.Warning, "NoDisk", "none left")
				return errors.New("boom")
			},
			outcome: tetherv1.Outcome_OUTCOME_RETRY,
			want:    []*tetherv1.HandlerEvent{{Type: warning, Reason: "NoDisk", Message: "none left"}}},
		{name: "a long message is cut",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.Record(sdk.Normal, "Long", strings.Repeat("é", 2000))
				return nil
			},
			outcome: tetherv1.Outcome_OUTCOME_OK,
			want:    []*tetherv1.HandlerEvent{{Type: normal, Reason: "Long", Message: strings.Repeat("é", 510) + "…"}}},
		{name: "invalid ones are dropped",
			fn: func(_ context.Context, ev *sdk.Event) error {
				ev.Record(sdk.EventType(7), "Odd", "")
				ev.Record(sdk.Normal, "", "no reason")
				ev.Record(sdk.Normal, strings.Repeat("R", tetherv1.MaxEventReasonBytes+1), "")
				ev.RecordAbout(sdk.ObjectRef{Kind: "Pod"}, sdk.Normal, "NoName", "")
				return nil
			},
			outcome: tetherv1.Outcome_OUTCOME_OK},
		{name: "past the limit of a delivery they are dropped",
			fn: func(_ context.Context, ev *sdk.Event) error {
				for i := range tetherv1.MaxAckEvents + 3 {
					ev.Record(sdk.Normal, fmt.Sprintf("N%d", i), "")
				}
				return nil
			},
			outcome: tetherv1.Outcome_OUTCOME_OK,
			want: func() (out []*tetherv1.HandlerEvent) {
				for i := range tetherv1.MaxAckEvents {
					out = append(out, &tetherv1.HandlerEvent{Type: normal, Reason: fmt.Sprintf("N%d", i)})
				}
				return out
			}()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ack := handleOne(t, tt.fn, delivery("d1"))
			if ack.GetOutcome() != tt.outcome {
				t.Fatalf("outcome = %v (%s), want %v", ack.GetOutcome(), ack.GetMessage(), tt.outcome)
			}
			got := ack.GetEvents()
			if len(got) != len(tt.want) {
				t.Fatalf("got %d events %v, want %v", len(got), got, tt.want)
			}
			for i := range got {
				if !proto.Equal(got[i], tt.want[i]) {
					t.Errorf("event %d = %v, want %v", i, got[i], tt.want[i])
				}
			}
		})
	}
}
