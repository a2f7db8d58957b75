package contract

import (
	"strings"
	"testing"
)

// Each state of a stuck hold has one reason, and its words name what an
// operator looks at next.
func TestWhyHeld(t *testing.T) {
	for _, c := range []struct {
		name  string
		stay  Stay
		want  StayReason
		words []string
	}{
		{"not leading wins", Stay{Presence: Present, Attempt: 3, Refused: "x"}, StayNotLeading, []string{"broker not leading"}},
		{"refused", Stay{Leading: true, Presence: Present, Attempt: 2, Refused: "forbidden"}, StayWriteRefused, []string{"write refused", "forbidden"}},
		{"strict absent", Stay{Leading: true, Presence: Absent, Policy: Strict, Binding: "cleanup"}, StayStrictAbsent, []string{"STRICT binding cleanup", "handler absent"}},
		{"strict long absent", Stay{Leading: true, Presence: LongAbsent, Policy: Strict, Binding: "cleanup"}, StayStrictAbsent, []string{"STRICT binding cleanup"}},
		{"in grace", Stay{Leading: true, Presence: InGrace, Policy: Strict, Attempt: 1}, StayInGrace, []string{"within its grace"}},
		{"retrying", Stay{Leading: true, Presence: Present, Policy: Hold, Binding: "d", Attempt: 4, Message: "db down"}, StayRetrying,
			[]string{"handler present and retrying", "binding d", "attempt 4", "db down"}},
		{"strict present retrying", Stay{Leading: true, Presence: Present, Policy: Strict, Binding: "d", Attempt: 1}, StayRetrying, []string{"attempt 1"}},
		{"working", Stay{Leading: true, Presence: Present, Policy: Hold, Binding: "d"}, StayWorking, []string{"binding d has not answered"}},
		{"unknown binding", Stay{Leading: true, Presence: Present}, StayWorking, []string{"binding ?"}},
	} {
		got, words := WhyHeld(c.stay)
		if got != c.want {
			t.Errorf("%s: reason %q, want %q", c.name, got, c.want)
		}
		for _, w := range c.words {
			if !strings.Contains(words, w) {
				t.Errorf("%s: %q lacks %q", c.name, words, w)
			}
		}
	}
}
