package lifecycle

import (
	"net"
	"testing"
	"time"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/auth"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestAStrangersHellosCostOneAccessReviewPerTTL: an identity that is not
// granted a handler name and says Hello as it again and again, with
// bindings, is refused with PermissionDenied every time and costs the API
// server one SubjectAccessReview per auth.DefaultDeniedTTL: not one per
// Hello, and none for its bindings, so that it cannot spend the review
// budget the granted handlers sign in and are rechecked with. The
// broker's tether_access_reviews_total counts the same reviews.
func TestAStrangersHellosCostOneAccessReviewPerTTL(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsURL := "http://" + lis.Addr().String() + "/metrics"
	s := startSecure(t, cp, func(o *broker.Options) { o.MetricsListener = lis })
	s.grant(t, "stranger", "stranger", widgetRule("get", "list", "watch", "patch"))
	stranger := s.token(t, "stranger")
	denied := map[string]string{"result": "denied"}
	brokerBefore, _ := sumOf(metricFamilies(t, metricsURL), "tether_access_reviews_total", denied)
	apiBefore := answered(t, cp, "subjectaccessreviews")
	start := time.Now()
	const hellos = 30
	for range hellos {
		h := s.handler("victim", stranger)
		h.OnCreate(widgets, nothing, sdk.Namespaces(s.ns))
		h.OnDelete(widgets, nothing, sdk.Namespaces(s.ns))
		expectRejection(t, s.rejected(t, h), "PermissionDenied",
			"handler:", "system:serviceaccount:"+s.ns+":stranger may not connect handlers.tether.dev victim")
	}
	// A denial is asked again once it expired: one review per TTL begun.
	most := 1 + float64(time.Since(start)/auth.DefaultDeniedTTL)
	apiReviews := answered(t, cp, "subjectaccessreviews") - apiBefore
	if apiReviews < 1 || apiReviews > most {
		t.Errorf("%d Hellos of a stranger cost %v SubjectAccessReviews, want 1 to %v (one per %v)", hellos, apiReviews, most, auth.DefaultDeniedTTL)
	}
	brokerAfter, _ := sumOf(metricFamilies(t, metricsURL), "tether_access_reviews_total", denied)
	if n := brokerAfter - brokerBefore; n != apiReviews {
		t.Errorf("tether_access_reviews_total{result=denied} grew by %v, the API server answered %v", n, apiReviews)
	}
}
