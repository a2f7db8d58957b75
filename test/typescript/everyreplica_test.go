package typescript

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

// waitTimeout bounds every wait on the cluster, a broker or the handler.
const waitTimeout = 30 * time.Second

// TestATypeScriptHandlersReviewsSurviveTheLeadersSIGKILL: two broker
// replicas with leader election behind one admission endpoint (a TCP
// balancer standing for the Service that selects every ready replica), and
// a TypeScript handler (everyreplica/handler.js, a node process) with a
// fail-closed validate binding given both replicas' addresses: it keeps a
// session to each, so that a review sent to either replica is answered,
// and its webhook points at the replicas' endpoint. Then writes at 20/s
// through the API server while the leader is SIGKILLed: every write begun
// after the kill is reviewed, none refused by the failure policy. (A review
// under way on the killed process's connection is lost whatever the
// brokers do, since the API server does not retry a webhook call; such
// writes are counted apart and logged.)
func TestATypeScriptHandlersReviewsSurviveTheLeadersSIGKILL(t *testing.T) {
	Build(t)
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	rs := startReplicas(t, cp)

	const name = "tsreviews"
	h := start(t, "handler", "node", filepath.Join("everyreplica", "handler.js"),
		"--broker", rs.Addrs[0], "--broker", rs.Addrs[1], "--name", name, "--namespace", ns)
	reviewed := func() int { return h.out.Count(func(l string) bool { return strings.HasPrefix(l, "REVIEW ") }) }
	var hook *admissionregistrationv1.ValidatingWebhook
	eventually(t, "the handler's webhook", func() bool {
		if h.exited() {
			t.Fatalf("the handler exited:\n%s", h.out.Text())
		}
		hook = webhook(cp, "tether-"+name)
		return hook != nil
	})
	// Each replica has an instance to answer: the follower's reviews-only session.
	for i, adm := range rs.Admission {
		if err := testenv.ReviewCreateAt(*hook, adm, widgetGVR, widget(ns, fmt.Sprintf("direct-%d", i))); err != nil {
			t.Fatalf("a review sent to replica %s (%s): %v", rs.IDs[i], adm, err)
		}
	}
	eventually(t, "the handler's webhook to point at the replicas' endpoint", func() bool {
		hook = webhook(cp, "tether-"+name)
		return hook != nil && strings.HasPrefix(*hook.ClientConfig.URL, "https://"+rs.Front.Addr()+"/")
	})

	tester := asTester(cp)
	loadStart := time.Now()
	load := testenv.StartWriteLoad(20, func(i int) error {
		_, err := tester.Resource(widgetGVR).Namespace(ns).Create(context.Background(),
			widget(ns, fmt.Sprintf("load-%05d", i)), metav1.CreateOptions{})
		return err
	})
	eventually(t, "40 writes of the load done before the kill", func() bool { return load.DoneSince(loadStart) >= 40 })
	leader := rs.leader(t)
	before := reviewed()
	rs.brokers[leader].Kill()
	// From here the process is gone (Kill waits for it): a write begun
	// before, even after the signal, may have reached it while it died.
	killed := time.Now()
	t.Logf("SIGKILLed the leader %s", leader)
	follower := rs.brokers[rs.IDs[0]]
	if leader == rs.IDs[0] {
		follower = rs.brokers[rs.IDs[1]]
	}
	eventually(t, "the follower leads", func() bool {
		return follower.out.Any(func(l string) bool { return strings.Contains(l, "broker ready:") })
	})
	led := time.Now()
	eventually(t, "60 writes of the load done under the new leader", func() bool { return load.DoneSince(led) >= 60 })
	writes := load.Stop()
	// A review on the killed process's connection when it died is lost
	// whatever the design (the API server does not retry a webhook call);
	// every write begun after the kill must be answered.
	inFlight, after := testenv.FailedSince(writes, killed)
	t.Logf("writes through the API server: %d, %d failed (%d of them begun before the kill); reviews answered by the handler: %d (%d after the kill)",
		len(writes), len(inFlight)+len(after), len(inFlight), reviewed(), reviewed()-before)
	for _, w := range inFlight {
		t.Logf("in flight at the kill: %s", w)
	}
	if len(after) > 0 {
		t.Errorf("%d writes begun after the leader's SIGKILL failed, the first: %s", len(after), after[0])
	}
}

// replicas are two broker processes with leader election, each with its
// own admission listener and URL, and a balancer in front of both given
// as the replicas' URL.
type replicas struct {
	*testenv.Replicas
	namespace string
	brokers   map[string]*process
}

func startReplicas(t *testing.T, cp *controlplane.ControlPlane) *replicas {
	t.Helper()
	bin := gobin.Build(t, "github.com/tether-dev/tether/cmd/broker")
	rs := &replicas{Replicas: testenv.NewReplicas(t, 2), namespace: cp.Namespace(t), brokers: map[string]*process{}}
	for i, id := range rs.IDs {
		rs.brokers[id] = start(t, id, bin, append([]string{"--kubeconfig", cp.KubeconfigPath(), "--listen", rs.Addrs[i],
			"--insecure", "--namespace", rs.namespace}, rs.Args(i)...)...)
	}
	return rs
}

// leader is the identity of the replica that leads, once one does.
func (rs *replicas) leader(t *testing.T) string {
	return testenv.AwaitLeader(t, controlplane.Get(t).Client(), rs.namespace)
}

// webhook is the first webhook of the named validating webhook
// configuration, once it has a URL; nil before.
func webhook(cp *controlplane.ControlPlane, name string) *admissionregistrationv1.ValidatingWebhook {
	c, err := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || len(c.Webhooks) == 0 || c.Webhooks[0].ClientConfig.URL == nil {
		return nil
	}
	return &c.Webhooks[0]
}

// asTester is a client that writes as another user than the brokers',
// which use the same admin credentials as the test: the webhooks let the
// brokers' own writes through unreviewed.
func asTester(cp *controlplane.ControlPlane) dynamic.Interface {
	cfg := cp.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tester", Groups: []string{"system:masters", "system:authenticated"}}
	return dynamic.NewForConfigOrDie(cfg)
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, waitTimeout, what, cond)
}
