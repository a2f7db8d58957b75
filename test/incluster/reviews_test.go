package incluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

// The tests below install the broker with deploy/ (two replicas, the
// admission Service over both, the liveness address on the Pod's IP) and
// restart the example handler, dialling the headless Service, with its TTL
// webhook fail-closed. Secrets with a bad ttl are written at 20 a second,
// each of which the handler's answer must refuse, while the leader dies.
// Each write is counted as answered (refused with the handler's message),
// failed open (admitted) or refused (by the failure policy, or anything
// else): none may fail.

// TestReviewsSurviveTheLeadersPodDeletion: the leader's Pod deleted (a
// drain, an eviction, a rollout), every write is answered.
func TestReviewsSurviveTheLeadersPodDeletion(t *testing.T) {
	c := node.Get(t)
	load, begun := reviewsUnderLoad(t, c)
	kube := c.Client()
	leader, err := readyLeader(context.Background(), kube)
	if err != nil {
		t.Fatal(err)
	}
	deleted := time.Now()
	if err := kube.CoreV1().Pods(tetherNS).Delete(context.Background(), leader, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	next := waitForNewReplica(t, c, leader)
	t.Logf("leader %s deleted: %s leads, and the handler has a session to every replica, %s after", leader, next, time.Since(deleted).Round(100*time.Millisecond))
	settled := time.Now()
	waitForWrites(t, load, settled, 60, "60 writes done after the Pod's replacement")
	report(t, "the leader's Pod deleted", load.Stop(), begun, time.Now(), time.Time{})
}

// TestReviewsSurviveTheLeadersProcessKilled: the leader's process
// SIGKILLed (a crash, an OOM kill), every write is answered, those under
// way at the kill too: the API server does not retry a webhook call, but
// the killed Pod's relay, which serves HTTPS with the admission
// certificate, sends each review the broker did not answer to the other
// replica.
func TestReviewsSurviveTheLeadersProcessKilled(t *testing.T) {
	c := node.Get(t)
	load, begun := reviewsUnderLoad(t, c)
	t.Cleanup(func() { restartBrokers(t, c) }) // no container left restarted for the next test
	kube := c.Client()
	leader, err := readyLeader(context.Background(), kube)
	if err != nil {
		t.Fatal(err)
	}
	pid := brokerPID(t, leader)
	// Frozen first, so that reviews are surely under way on the broker's
	// connections when it dies: the relay must resend those too. A review
	// takes some milliseconds; one begun half a second ago and not done is
	// waiting on the frozen process.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP of %s's broker (pid %d): %v", leader, pid, err)
	}
	testenv.Eventually(t, time.Minute, "2 writes under way on the frozen broker", func() bool {
		return load.UnderWay(time.Now().Add(-500*time.Millisecond)) >= 2
	})
	underWay := load.UnderWay(time.Now())
	killed := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL of %s's broker (pid %d): %v", leader, pid, err)
	}
	took := testenv.WaitFor(t, 2*time.Minute, "the killed container restarted and a Ready leader", func(ctx context.Context) error {
		if err := restarted(ctx, kube, leader); err != nil {
			return err
		}
		_, err := readyLeader(ctx, kube)
		return err
	})
	t.Logf("leader %s SIGKILLed with %d writes under way: a Ready leader and the container back %s after", leader, underWay, took.Round(100*time.Millisecond))
	back := time.Now()
	waitForWrites(t, load, back, 60, "60 writes done after the kill")
	report(t, "the leader's process SIGKILLed", load.Stop(), begun, time.Now(), killed)
	// What kept them answered: the reviews the killed Pod's relay sent to
	// the other replica while its broker was dead (and the connections it
	// forwarded byte for byte, none once it serves HTTPS).
	logs := kubectl(t, c, "-n", tetherNS, "logs", leader, "-c", "relay")
	for line := range strings.SplitSeq(logs, "\n") {
		// Each says why: refused (sent after the kill) or the connection's
		// end (under way at the kill).
		if strings.Contains(line, "resent it to another replica") {
			t.Logf("relay: %s", line)
		}
	}
	t.Logf("the relay of %s resent %d reviews and forwarded %d connections to the other replica", leader,
		strings.Count(logs, "resent it to another replica"), strings.Count(logs, "forwarded it to another replica"))
}

// reviewsUnderLoad installs the broker and the example handler, fail-closed,
// in a namespace of the test's, and starts the load once the handler has
// a session to each replica; it returns the load, stopped at the end of
// the test, and when it began, once 40 writes were done.
func reviewsUnderLoad(t *testing.T, c *node.Cluster) (*testenv.WriteLoad, time.Time) {
	t.Helper()
	install(t, c)
	followBrokerLogs(t, c)
	ns := namespace(t, c, "reviews")
	optIn(t, c, ns)
	failClosed(t, c)
	// The handler's sessions, when a write is refused for want of one.
	followLogs(t, c, exampleNS, "app.kubernetes.io/name=example-handler", "the example handler's Pods")
	testenv.WaitFor(t, time.Minute, "the handler on every replica", func(ctx context.Context) error {
		return handlerOnEveryReplica(ctx, c.Client())
	})
	// Until its relay has the admission certificate, a Pod's reviews are
	// forwarded byte for byte, and one under way at a kill is lost.
	testenv.WaitFor(t, time.Minute, "every relay serving HTTPS", func(ctx context.Context) error {
		return relaysServeHTTPS(ctx, c.Client())
	})
	begun := time.Now()
	load := startBadTTLLoad(c.Client(), ns, 20)
	t.Cleanup(func() { load.Stop() })
	waitForWrites(t, load, begun, 40, "40 writes done before the leader dies")
	return load, begun
}

// failClosed restarts the example handler with --ttl-webhook-fail-closed
// (kubectl apply of deploy/ takes it back) and waits until its webhook
// fails closed and points at every replica's admission Service: the
// leader points it there only while every instance of the handler keeps a
// session to every replica.
func failClosed(t *testing.T, c *node.Cluster) {
	t.Helper()
	// As installed, the handler keeps a session to every replica only if
	// both were Ready when it started: the SDK looks at the name's
	// addresses once, and keeps one session when there is one.
	if w, err := c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(context.Background(), "tether-example", metav1.GetOptions{}); err == nil {
		for _, h := range w.Webhooks {
			t.Logf("as installed, webhook %s calls %+v", h.Name, h.ClientConfig.Service)
		}
	}
	kubectl(t, c, "-n", exampleNS, "patch", "deployment", "example-handler", "--type=json",
		`-p=[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--ttl-webhook-fail-closed"}]`)
	t.Cleanup(func() { kubectl(t, c, "apply", "-k", filepath.Join(deployDir(t), "example-handler")) })
	kubectl(t, c, "-n", exampleNS, "rollout", "status", "deployment/example-handler", "--timeout=3m")
	testenv.WaitFor(t, 2*time.Minute, "the TTL webhook failing closed, through tether-broker-admission", func(ctx context.Context) error {
		w, err := c.Client().AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "tether-example", metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, h := range w.Webhooks {
			if !strings.HasPrefix(h.Name, "validate-ttl.") {
				continue
			}
			if s := h.ClientConfig.Service; s == nil || s.Name != "tether-broker-admission" ||
				h.FailurePolicy == nil || *h.FailurePolicy != admissionregistrationv1.Fail {
				return fmt.Errorf("webhook %s: service %+v, failure policy %v", h.Name, h.ClientConfig.Service, h.FailurePolicy)
			}
			return nil
		}
		return fmt.Errorf("no webhook validate-ttl in %s", w.Name)
	})
}

// waitForNewReplica waits, once the leader gone was deleted, for another
// Ready leader, a replacement Ready beside it, and a session of the handler
// to each, and returns the new leader.
func waitForNewReplica(t *testing.T, c *node.Cluster, gone string) string {
	t.Helper()
	var next string
	testenv.WaitFor(t, 2*time.Minute, "another Ready leader, and the handler on every replica", func(ctx context.Context) error {
		l, err := readyLeader(ctx, c.Client())
		if err != nil {
			return err
		}
		if l == gone {
			return fmt.Errorf("%s still leads", gone)
		}
		next = l
		return handlerOnEveryReplica(ctx, c.Client())
	})
	return next
}

// handlerOnEveryReplica is nil when the example handler's log says it
// connected to each broker Pod Ready now (the Go SDK logs the replica's
// address).
func handlerOnEveryReplica(ctx context.Context, kube kubernetes.Interface) error {
	brokers, err := kube.CoreV1().Pods(tetherNS).List(ctx, metav1.ListOptions{LabelSelector: brokerLabel})
	if err != nil {
		return err
	}
	handlers, err := kube.CoreV1().Pods(exampleNS).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=example-handler"})
	if err != nil {
		return err
	}
	var logs strings.Builder
	for _, h := range handlers.Items {
		if h.DeletionTimestamp != nil {
			continue
		}
		out, err := kube.CoreV1().Pods(exampleNS).GetLogs(h.Name, &corev1.PodLogOptions{}).DoRaw(ctx)
		if err != nil {
			return err
		}
		logs.Write(out)
	}
	for _, b := range brokers.Items {
		if b.DeletionTimestamp != nil || !podReady(&b) {
			continue
		}
		replica := fmt.Sprintf(`"replica":"%s:7443"`, b.Status.PodIP)
		connected := false
		for _, line := range strings.Split(logs.String(), "\n") {
			connected = connected || strings.Contains(line, "connected to broker") && strings.Contains(line, replica)
		}
		if !connected {
			return fmt.Errorf("the handler has not connected to %s at %s", b.Name, b.Status.PodIP)
		}
	}
	return nil
}

// relaysHTTPS is in a relay's log once it serves HTTPS (broker/relay's
// loadCert).
const relaysHTTPS = "relaying admission requests over HTTPS"

// relaysServeHTTPS is nil once the relay of each broker Pod says it
// serves HTTPS.
func relaysServeHTTPS(ctx context.Context, kube kubernetes.Interface) error {
	brokers, err := kube.CoreV1().Pods(tetherNS).List(ctx, metav1.ListOptions{LabelSelector: brokerLabel})
	if err != nil {
		return err
	}
	for _, b := range brokers.Items {
		if b.DeletionTimestamp != nil {
			continue
		}
		out, err := kube.CoreV1().Pods(tetherNS).GetLogs(b.Name, &corev1.PodLogOptions{Container: "relay"}).DoRaw(ctx)
		if err != nil {
			return err
		}
		if !strings.Contains(string(out), relaysHTTPS) {
			return fmt.Errorf("the relay of %s does not serve HTTPS yet", b.Name)
		}
	}
	return nil
}

// brokerPID is the process of the broker container of pod on this machine
// (a container's HOSTNAME is its Pod's name), not its relay's (`/broker
// relay`, the same binary), which keeps the Pod's admission port answering
// while the broker is dead.
func brokerPID(t *testing.T, pod string) int {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if !strings.HasPrefix(string(cmd), "/broker\x00") || strings.HasPrefix(string(cmd), "/broker\x00relay\x00") {
			continue
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		for _, kv := range strings.Split(string(env), "\x00") {
			if kv == "HOSTNAME="+pod {
				return pid
			}
		}
	}
	t.Fatalf("no broker process of %s on this machine", pod)
	return 0
}

// restarted is nil once pod's broker container has restarted and is Ready.
func restarted(ctx context.Context, kube kubernetes.Interface, pod string) error {
	p, err := kube.CoreV1().Pods(tetherNS).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, s := range p.Status.ContainerStatuses {
		if s.RestartCount > 0 && s.Ready {
			return nil
		}
	}
	return fmt.Errorf("%s: containers %+v", pod, p.Status.ContainerStatuses)
}

// restartBrokers rolls the broker's Pods out again and waits for a Ready
// leader.
func restartBrokers(t *testing.T, c *node.Cluster) {
	kubectl(t, c, "-n", tetherNS, "rollout", "restart", "deployment/tether-broker")
	kubectl(t, c, "-n", tetherNS, "rollout", "status", "deployment/tether-broker", "--timeout=5m")
	testenv.WaitFor(t, 2*time.Minute, "a Ready leader after the rollout", func(ctx context.Context) error {
		_, err := readyLeader(ctx, c.Client())
		return err
	})
}
