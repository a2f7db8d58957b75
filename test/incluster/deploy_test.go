package incluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/test/example"
	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/testenv"
)

const (
	tetherNS    = "tether-system"
	exampleNS   = "tether-example"
	brokerLabel = "app.kubernetes.io/name=tether-broker"
	leaderLease = "tether-broker-leader"
	exampleHold = "tether.dev/example"
)

// install applies deploy/ (again: apply is idempotent) and waits until the
// broker has one Ready leader and the example handler is Ready. It returns
// the leader's Pod name and how long the wait took.
func install(t *testing.T, c *node.Cluster) (string, time.Duration) {
	t.Helper()
	kubectl(t, c, "apply", "-k", deployDir(t))
	var leader string
	took := testenv.WaitFor(t, 3*time.Minute, "one Ready broker leader and a Ready example handler", func(ctx context.Context) error {
		var err error
		leader, err = readyLeader(ctx, c.Client())
		if err != nil {
			return err
		}
		return deploymentReady(ctx, c.Client(), exampleNS, "example-handler")
	})
	return leader, took
}

// readyLeader checks that the broker runs as deploy/ says (two Pods
// Running and Ready, exactly one labelled leader, it the holder of the
// leader Lease and the one endpoint of the Service) and returns its name.
func readyLeader(ctx context.Context, kube kubernetes.Interface) (string, error) {
	pods, err := kube.CoreV1().Pods(tetherNS).List(ctx, metav1.ListOptions{LabelSelector: brokerLabel})
	if err != nil {
		return "", err
	}
	var ready, labelled []string
	ips := map[string]string{}
	for _, p := range pods.Items {
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || !podReady(&p) {
			continue
		}
		ready = append(ready, p.Name)
		if p.Labels[broker.LeaderLabel] == "true" {
			labelled = append(labelled, p.Name)
		}
		ips[p.Name] = p.Status.PodIP
	}
	if len(ready) != 2 || len(labelled) != 1 {
		return "", fmt.Errorf("broker Pods ready %v, labelled leader %v: want 2 ready, 1 labelled", ready, labelled)
	}
	leader := labelled[0]
	lease, err := kube.CoordinationV1().Leases(tetherNS).Get(ctx, leaderLease, metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	if h := lease.Spec.HolderIdentity; h == nil || *h != leader {
		return "", fmt.Errorf("%s is labelled leader but the leader Lease is held by %v", leader, lease.Spec.HolderIdentity)
	}
	epSlices, err := kube.DiscoveryV1().EndpointSlices(tetherNS).List(ctx, metav1.ListOptions{LabelSelector: "kubernetes.io/service-name=tether-broker"})
	if err != nil {
		return "", err
	}
	var endpoints []string
	for _, sl := range epSlices.Items {
		for _, e := range sl.Endpoints {
			if e.Conditions.Ready == nil || *e.Conditions.Ready {
				endpoints = append(endpoints, e.Addresses...)
			}
		}
	}
	if len(endpoints) != 1 || endpoints[0] != ips[leader] {
		return "", fmt.Errorf("the Service's ready endpoints are %v, want only the leader %s at %s", endpoints, leader, ips[leader])
	}
	return leader, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func deploymentReady(ctx context.Context, kube kubernetes.Interface, ns, name string) error {
	d, err := kube.AppsV1().Deployments(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if d.Status.ReadyReplicas < 1 || d.Status.UpdatedReplicas != d.Status.Replicas {
		return fmt.Errorf("deployment %s: %d ready, %d of %d updated", name, d.Status.ReadyReplicas, d.Status.UpdatedReplicas, d.Status.Replicas)
	}
	return nil
}

// TestDeployRunsOneReadyLeader: kubectl apply -k deploy/ on a real node
// gives two Ready broker Pods, exactly one of them labelled leader and
// behind the Service, and probes that keep them running.
func TestDeployRunsOneReadyLeader(t *testing.T) {
	c := node.Get(t)
	leader, took := install(t, c)
	t.Logf("apply to a Ready leader and handler: %s (leader %s)", took.Round(100*time.Millisecond), leader)
	pods, err := c.Client().CoreV1().Pods(tetherNS).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		for _, s := range p.Status.ContainerStatuses {
			if s.RestartCount > 0 {
				t.Errorf("%s/%s restarted %d times", p.Name, s.Name, s.RestartCount)
			}
		}
	}
	// The containers' memory, from their cgroups (the kubelet's summary
	// API cannot read this machine's root filesystem and answers nothing).
	mem := containerMemory(t)
	for _, p := range pods.Items {
		if m, ok := mem[p.Name]; ok {
			t.Logf("%s: cgroup memory %s", p.Name, m)
		} else {
			t.Errorf("no process of %s found on the node", p.Name)
		}
		if m, ok := mem[p.Name+"/relay"]; ok {
			t.Logf("%s, its relay: cgroup memory %s", p.Name, m)
		}
	}
}

// containerMemory maps the name of each Pod whose process runs on this
// machine (a container's HOSTNAME is its Pod's name) to its memory cgroup's
// usage and RSS; the broker's relay container (`/broker relay`) is under
// the Pod's name plus "/relay".
func containerMemory(t *testing.T) map[string]string {
	t.Helper()
	out := map[string]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		cg, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cgroup"))
		if err != nil || !strings.Contains(string(cg), ":/k8s.io/") {
			continue
		}
		cmd, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.HasPrefix(string(cmd), "/pause") {
			continue // the Pod's sandbox
		}
		env, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		var pod string
		for _, kv := range strings.Split(string(env), "\x00") {
			if v, ok := strings.CutPrefix(kv, "HOSTNAME="); ok {
				pod = v
			}
		}
		var path string
		for _, line := range strings.Split(string(cg), "\n") {
			if _, p, ok := strings.Cut(line, ":memory:"); ok {
				path = filepath.Join("/sys/fs/cgroup/memory", p)
			}
		}
		if pod == "" || path == "" {
			continue
		}
		if strings.HasPrefix(string(cmd), "/broker\x00relay\x00") {
			pod += "/relay"
		}
		usage, err1 := os.ReadFile(filepath.Join(path, "memory.usage_in_bytes"))
		stat, err2 := os.ReadFile(filepath.Join(path, "memory.stat"))
		if err1 != nil || err2 != nil {
			continue
		}
		var rss int64
		for _, line := range strings.Split(string(stat), "\n") {
			if v, ok := strings.CutPrefix(line, "total_rss "); ok {
				rss, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		u, _ := strconv.ParseInt(strings.TrimSpace(string(usage)), 10, 64)
		out[pod] = fmt.Sprintf("usage %.1f MiB, rss %.1f MiB", float64(u)/(1<<20), float64(rss)/(1<<20))
	}
	return out
}

// TestExampleHandlerWorksThroughTheService is the demo's story in the
// cluster: the handler, a Pod, reaches the broker through its Service with
// its ServiceAccount token over TLS (the CA from the ConfigMap the broker
// publishes); a Secret is replicated and held, a 3s TTL is reaped, and a
// bad TTL is refused by the webhook the API server calls through the
// Service.
func TestExampleHandlerWorksThroughTheService(t *testing.T) {
	c := node.Get(t)
	install(t, c)
	kube := c.Client()
	src, target := namespace(t, c, "source"), namespace(t, c, "target")
	optIn(t, c, src, target)
	secrets := kube.CoreV1().Secrets(src)
	ctx := context.Background()

	_, err := secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Annotations: map[string]string{example.AnnEnabled: "true", example.AnnInclude: target}},
		StringData: map[string]string{"password": "hunter2"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, optInBound, "the copy and the hold", func(ctx context.Context) error {
		cp, err := kube.CoreV1().Secrets(target).Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if string(cp.Data["password"]) != "hunter2" {
			return fmt.Errorf("copy holds %q", cp.Data["password"])
		}
		s, err := secrets.Get(ctx, "db", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if !slices.Contains(s.Finalizers, exampleHold) {
			return fmt.Errorf("source finalizers %v, want %s", s.Finalizers, exampleHold)
		}
		return nil
	})

	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "short-lived", Annotations: map[string]string{example.AnnTTL: "3s"}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the 3s TTL to be reaped", func(ctx context.Context) error {
		_, err := secrets.Get(ctx, "short-lived", metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("still there (%v)", err)
	})

	_, err = secrets.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "bad-ttl", Annotations: map[string]string{example.AnnTTL: "banana"}},
	}, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "banana") {
		t.Fatalf("a Secret with ttl banana: got %v, want the webhook's refusal", err)
	}
	t.Logf("refused: %v", err)
}

// optInBound is how long the example handler may take to work in a
// namespace that just opted in: its --grant-interval (1 min), a
// reconnect, and the work itself.
const optInBound = 2 * time.Minute

// optIn opts the namespaces in to the example handler, as
// deploy/example-handler/rbac.yaml tells an admin to.
func optIn(t *testing.T, c *node.Cluster, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		kubectl(t, c, "-n", ns, "create", "rolebinding", "tether-example-handler",
			"--clusterrole=tether-example-handler-objects", "--serviceaccount="+exampleNS+":example-handler")
	}
}

// namespace makes a namespace for the test and deletes it at the end,
// waiting until it is gone (the namespace controller runs here).
func namespace(t *testing.T, c *node.Cluster, prefix string) string {
	t.Helper()
	ns, err := c.Client().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		err := c.Client().CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("deleting namespace %s: %v", ns.Name, err)
			return
		}
		testenv.WaitFor(t, 2*time.Minute, "namespace "+ns.Name+" to be gone", func(ctx context.Context) error {
			_, err := c.Client().CoreV1().Namespaces().Get(ctx, ns.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("still there (%v)", err)
		})
	})
	return ns.Name
}
