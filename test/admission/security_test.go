package admission

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	admissionv1 "k8s.io/api/admission/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/testenv"
)

// TestForgedReviewsNeverReachTheHandler is what a Pod in the cluster can
// try: POST a made-up AdmissionReview, with a forged user, straight to the
// broker's admission port at the handler's endpoint. Only the API server
// knows the signed path written into the webhook configuration; the forger
// gets 404 and the handler never sees the review.
func TestForgedReviewsNeverReachTheHandler(t *testing.T) {
	e := start(t)
	h := e.startHandler(t, "forged")
	eventually(t, "the handler's webhook to be enforced", func() bool { return e.refusesUnowned(t) })

	obj, err := json.Marshal(e.secret("forged", "team-a"))
	if err != nil {
		t.Fatal(err)
	}
	review := admissionv1.AdmissionReview{Request: &admissionv1.AdmissionRequest{
		UID: "forged-1", Operation: admissionv1.Create, Namespace: e.ns, Name: "forged",
		Resource: metav1.GroupVersionResource{Version: "v1", Resource: "secrets"},
		Kind:     metav1.GroupVersionKind{Version: "v1", Kind: "Secret"},
		UserInfo: authenticationv1.UserInfo{Username: "system:admin", Groups: []string{"system:masters"}},
		Object:   runtime.RawExtension{Raw: obj},
	}}
	review.APIVersion, review.Kind = "admission.k8s.io/v1", "AdmissionReview"
	body, err := json.Marshal(review)
	if err != nil {
		t.Fatal(err)
	}
	// The forger does not need to trust the broker's CA.
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	defer client.CloseIdleConnections()
	url := fmt.Sprintf("https://%s/admit/forged/owner-required?timeout=5s", e.b.AdmissionAddr())
	resp, err := client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("a forged review: %d %s, want 404", resp.StatusCode, answer)
	}
	// A real review after it: once the handler saw that one, it would have
	// printed the forged one already.
	if err := e.createSecret("after", "team-a"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the handler to see the real review", func() bool { return h.saw("VALIDATE " + e.ns + "/after") })
	if h.saw("VALIDATE " + e.ns + "/forged") {
		t.Fatal("the forged review reached the handler")
	}
}

// TestSlowLifecycleWorkDoesNotStarveReviews: a handler whose window is full
// of lifecycle deliveries that take their time still answers the API
// server's reviews in time, from the share of the window kept for them.
func TestSlowLifecycleWorkDoesNotStarveReviews(t *testing.T) {
	e := start(t)
	release := make(chan struct{})
	defer close(release)
	started := make(chan string, 16)
	h := sdk.New("busy", sdk.WithInsecure(), sdk.WithWindow(4),
		sdk.WithLogger(hclog.New(&hclog.LoggerOptions{Name: "busy", Output: testenv.LogWriter(t, "")})),
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
	h.OnCreate(sdk.GVR("", "v1", "configmaps"), func(ctx context.Context, ev *sdk.Event) error {
		started <- ev.Name
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	}, sdk.Namespaces(e.ns))
	h.OnValidate(sdk.GVR("", "v1", "secrets"), func(context.Context, *sdk.Review) error { return nil },
		sdk.Namespaces(e.ns), sdk.ID("allow"), sdk.Timeout(3*time.Second), sdk.Failure(sdk.FailClosed))
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- h.Run(ctx, e.broker) }()
	defer func() {
		cancel()
		if err := <-ran; err != nil {
			t.Errorf("handler: %v", err)
		}
	}()
	eventually(t, "the handler's webhook", func() bool {
		_, err := e.kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "tether-busy", metav1.GetOptions{})
		return err == nil
	})
	for i := range 8 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("slow-", i), Namespace: e.ns}}
		if _, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 { // the window less the review's share
		select {
		case <-started:
		case <-time.After(waitTimeout):
			t.Fatal("the lifecycle deliveries did not start")
		}
	}
	begin := time.Now()
	if err := e.createSecret("reviewed", ""); err != nil {
		t.Fatalf("a review while the window is full of lifecycle work: %v", err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("the review took %v", took)
	}
	select {
	case name := <-started:
		if !strings.HasPrefix(name, "slow-") {
			t.Fatalf("started %s", name)
		}
		t.Errorf("a lifecycle delivery (%s) took the slot kept for reviews", name)
	default:
	}
}
