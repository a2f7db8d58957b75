package lifecycle

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"

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
	s := startSecure(t, cp, func(o *broker.Options) { o.MetricsListener, o.MetricsOpen = lis, true })
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

// TestMetricsNeedATokenAndTheRight: a broker that authenticates handlers
// serves /metrics only to a bearer token the API server accepts whose
// identity may get the non-resource URL /metrics, as deploy/'s ClusterRole
// tether-metrics-reader grants; /healthz needs nothing.
func TestMetricsNeedATokenAndTheRight(t *testing.T) {
	cp := controlplane.Get(t)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + lis.Addr().String()
	s := startSecure(t, cp, func(o *broker.Options) { o.MetricsListener = lis })
	scraper := s.token(t, "scraper")
	get := func(path, token string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if code, body := get("/healthz", ""); code != http.StatusOK {
		t.Errorf("/healthz without a token: %d %s, want 200", code, body)
	}
	for _, c := range []struct {
		name, token, says string
		code              int
	}{
		{"no token", "", "a bearer token is required", http.StatusUnauthorized},
		{"a made-up token", "made-up", "invalid token", http.StatusUnauthorized},
		{"a token without the right", scraper, "system:serviceaccount:" + s.ns + ":scraper may not get /metrics", http.StatusForbidden},
	} {
		if code, body := get("/metrics", c.token); code != c.code || !strings.Contains(body, c.says) {
			t.Errorf("/metrics, %s: %d %q, want %d saying %q", c.name, code, body, c.code, c.says)
		}
	}
	s.grantCluster(t, "metrics-reader", "scraper", rbacv1.PolicyRule{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}})
	// The denial is remembered for auth.DefaultDeniedTTL.
	eventually(t, "/metrics to answer the granted scraper", func() bool {
		code, body := get("/metrics", scraper)
		return code == http.StatusOK && strings.Contains(body, "tether_access_reviews_total")
	})
}
