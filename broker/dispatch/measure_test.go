package dispatch

import (
	"slices"
	"testing"

	"github.com/tether-dev/tether/broker/contract"
	"github.com/tether-dev/tether/broker/informer"
	"github.com/tether-dev/tether/broker/metrics"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

func TestKindLabel(t *testing.T) {
	for k, want := range map[tetherv1.DeliveryKind]string{
		tetherv1.DeliveryKind_DELIVERY_KIND_CREATE:       "create",
		tetherv1.DeliveryKind_DELIVERY_KIND_TICK:         "tick",
		tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_START: "daemon-start",
		tetherv1.DeliveryKind_DELIVERY_KIND_DAEMON_STOP:  "daemon-stop",
	} {
		if got := kindLabel(k); got != want {
			t.Errorf("kindLabel(%v) = %q, want %q", k, got, want)
		}
	}
}

// TestEveryReleaseRuleHasAMetricReason: each rule that releases is counted
// under a reason the metrics know.
func TestEveryReleaseRuleHasAMetricReason(t *testing.T) {
	for _, r := range []contract.Rule{contract.RuleAcked, contract.RuleTimeout, contract.RuleAbsent,
		contract.RuleLongAbsent, contract.RuleNoLongerMatching} {
		if !slices.Contains(metrics.ReleaseReasons, releaseReasons[r]) {
			t.Errorf("rule %s: reason %q is not one of %v", r, releaseReasons[r], metrics.ReleaseReasons)
		}
	}
	o := &object{work: &objectWork{}, cur: &informer.Object{}}
	daemonStopTimedOut(o) // stopped for another reason: not a release
	if o.daemonTimedOut {
		t.Error("a daemon stop timeout on a live object counted for its deletion")
	}
	o.cur = &informer.Object{Deleting: true}
	daemonStopTimedOut(o)
	if !o.daemonTimedOut {
		t.Error("a daemon stop timeout while deleting not counted")
	}
}
