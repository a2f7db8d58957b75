package pyhandler

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/example"
	"github.com/tether-dev/tether/test/gobin"
	"github.com/tether-dev/tether/test/testenv"
)

// TestPythonReviewsSurviveTheLeadersSIGKILL: two broker processes with
// leader election behind one admission endpoint (a TCP balancer standing
// for the Service that selects every ready replica), and
// replicas_handler.py, a fail-closed validate binding, given both brokers.
// The handler keeps a session to each (the follower's for reviews only),
// so a review sent straight to either replica is answered by it and the
// webhook points at the replicas' endpoint; then, with writes at 20/s
// through the API server, the leader is SIGKILLed: the handler's session
// with the new leader becomes a full one, and every write begun after the
// kill is reviewed and admitted (as TestReviewsSurviveTheLeadersSIGKILL in
// test/lifecycle checks for the Go SDK).
func TestPythonReviewsSurviveTheLeadersSIGKILL(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	// The brokers' own namespace, which their webhooks never review.
	rs := startBrokerReplicas(t, cp, cp.Namespace(t))
	const name = "py-every"
	h := startReplicasHandler(t, name, ns, rs.Addrs...)
	h.stderr.wait(t, welcomed, 1)

	hook := validatingWebhook(t, cp, "tether-"+name)
	for i, addr := range rs.Admission {
		var last error
		testenv.Eventually(t, waitTimeout, fmt.Sprintf("a review sent to replica %s answered by the handler", rs.IDs[i]), func() bool {
			last = testenv.ReviewCreateAt(hook, addr, widgetGVR, newWidget(ns, fmt.Sprintf("direct-%d", i), nil))
			if last != nil {
				t.Logf("a review sent to replica %s: %v", rs.IDs[i], last)
			}
			return last == nil
		})
		h.stderr.wait(t, fmt.Sprintf("review CREATE %s/direct-%d", ns, i), 1)
	}
	if url, want := *validatingWebhook(t, cp, "tether-"+name).ClientConfig.URL, "https://"+rs.Front.Addr()+"/"; !strings.HasPrefix(url, want) {
		t.Errorf("the webhook of a handler on every replica points at %s, want the replicas' endpoint %s", url, want)
	}
	if !h.stderr.has("reviews only") {
		t.Error("the handler has no session for reviews only: the follower's session should be one")
	}

	tester := asTester(t, cp)
	eventually(t, "a write reviewed through the API server", func() bool {
		_, err := tester.Resource(widgetGVR).Namespace(ns).Create(context.Background(),
			newWidget(ns, fmt.Sprintf("probe-%d", time.Now().UnixNano()), nil), metav1.CreateOptions{})
		return err == nil
	})
	loadStart := time.Now()
	load := testenv.StartWriteLoad(20, func(i int) error {
		_, err := tester.Resource(widgetGVR).Namespace(ns).Create(context.Background(), newWidget(ns, fmt.Sprintf("load-%05d", i), nil), metav1.CreateOptions{})
		return err
	})
	eventually(t, "40 writes of the load done before the kill", func() bool { return load.DoneSince(loadStart) >= 40 })
	leader := rs.leader(t, cp)
	reviewedBefore := h.stderr.count("review CREATE " + ns + "/load-")
	rs.brokers[leader].proc.Kill()
	// From here the process is gone (Kill waits for it): a write begun
	// before, even after the signal, may have reached it while it died.
	killed := time.Now()
	t.Logf("SIGKILLed the leader %s", rs.IDs[leader])
	follower := rs.brokers[1-leader]
	eventually(t, "the follower leads", func() bool { return follower.out.Any(containing("broker ready:")) })
	eventually(t, "the handler's full session with the new leader", func() bool {
		return h.stderr.Count(func(l string) bool { return strings.Contains(l, welcomed) && !strings.Contains(l, "reviews only") }) >= 2
	})
	led := time.Now()
	eventually(t, "60 writes of the load done under the new leader", func() bool { return load.DoneSince(led) >= 60 })
	writes := load.Stop()
	inFlight, after := testenv.FailedSince(writes, killed)
	reviewedAfter := h.stderr.count("review CREATE "+ns+"/load-") - reviewedBefore
	t.Logf("writes through the API server: %d, %d failed (%d of them begun before the kill); reviews of the load by the handler after the kill: %d",
		len(writes), len(inFlight)+len(after), len(inFlight), reviewedAfter)
	for _, f := range inFlight {
		t.Logf("in flight at the kill: %s", f)
	}
	if len(after) > 0 {
		t.Errorf("%d writes begun after the leader's SIGKILL failed, the first: %s", len(after), after[0])
	}
	if reviewedAfter < 60 {
		t.Errorf("the handler reviewed %d writes of the load after the kill, want at least the 60 done under the new leader", reviewedAfter)
	}
}

// brokerReplicas are two broker processes with leader election, each with
// its own admission listener and URL, and a balancer in front of both
// given as the replicas' URL.
type brokerReplicas struct {
	*testenv.Replicas
	namespace string
	brokers   []*brokerReplica
}

type brokerReplica struct {
	proc *example.Process
	out  testenv.Lines
}

func startBrokerReplicas(t *testing.T, cp *controlplane.ControlPlane, namespace string) *brokerReplicas {
	t.Helper()
	bin := gobin.Build(t, "github.com/tether-dev/tether/cmd/broker")
	rs := &brokerReplicas{Replicas: testenv.NewReplicas(t, 2), namespace: namespace}
	for i, id := range rs.IDs {
		b := &brokerReplica{}
		b.out.Log = testenv.LogWriter(t, id+": ")
		args := append([]string{"--kubeconfig", cp.KubeconfigPath(), "--listen", rs.Addrs[i], "--insecure",
			"--namespace", namespace, "--metrics-listen", "",
			"--default-backoff", "100ms", "--default-max-backoff", "1s"}, rs.Args(i)...)
		var err error
		if b.proc, err = example.Start(id, bin, args, &b.out); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(b.proc.Kill)
		rs.brokers = append(rs.brokers, b)
	}
	return rs
}

// leader is the index of the replica that holds the leader Lease.
func (rs *brokerReplicas) leader(t *testing.T, cp *controlplane.ControlPlane) int {
	t.Helper()
	holder, err := testenv.LeaseHolder(context.Background(), cp.Client(), rs.namespace)
	if err != nil {
		t.Fatal(err)
	}
	i := rs.Index(holder)
	if i < 0 {
		t.Fatalf("the leader Lease is held by %q, not a replica of the test's", holder)
	}
	return i
}

// startReplicasHandler runs replicas_handler.py with `python3 -m tether run`
// given every broker, in plain text, serving namespace ns.
func startReplicasHandler(t *testing.T, name, ns string, brokers ...string) *handlerProcess {
	t.Helper()
	script, err := filepath.Abs("replicas_handler.py")
	if err != nil {
		t.Fatal(err)
	}
	// -E -s -B -u: -I without -P, since -m must find the SDK in the working directory.
	args := []string{"-E", "-s", "-B", "-u", "-m", "tether", "run", script, "--insecure", "--name", name,
		"--namespace", ns, "--max-backoff", "0.5"}
	for _, b := range brokers {
		args = append(args, "--broker", b)
	}
	cmd := exec.Command(python, args...)
	cmd.Dir = sdkDir
	return startProcess(t, name, cmd)
}

// validatingWebhook is the first webhook of the named configuration, once
// it has a URL.
func validatingWebhook(t *testing.T, cp *controlplane.ControlPlane, name string) admissionregistrationv1.ValidatingWebhook {
	t.Helper()
	var hook admissionregistrationv1.ValidatingWebhook
	eventually(t, "the webhook configuration "+name, func() bool {
		c, err := cp.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil || len(c.Webhooks) == 0 || c.Webhooks[0].ClientConfig.URL == nil {
			return false
		}
		hook = c.Webhooks[0]
		return true
	})
	return hook
}

func containing(s string) func(string) bool {
	return func(l string) bool { return strings.Contains(l, s) }
}
