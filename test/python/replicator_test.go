package pyhandler

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/hold"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/progress"
	"github.com/tether-dev/tether/test/controlplane"
)

// What sdk/python/examples/replicator.py documents.
const (
	annEnabled = "replicator.tether.dev/enabled"
	annInclude = "replicator.tether.dev/include-namespaces"
	annExclude = "replicator.tether.dev/exclude-namespaces"
	annSource  = "replicator.tether.dev/source"
	labelCopy  = "replicator.tether.dev/copy"
)

const (
	// replicatorGrace is the broker's grace for an absent handler, as in
	// the demo (10 s there): long enough to start the handler again in it.
	replicatorGrace = 8 * time.Second
	// staysFor is how long a held source deleted while the handler is
	// away is watched to stay Terminating (the demo's absentFor).
	staysFor = 3 * time.Second
	// annInstances on a handler's presence Lease counts its connected
	// instances (written by broker/presence).
	annInstances = "tether.dev/instances"
)

// replicator is sdk/python/examples/replicator.py run by `python3 -m tether
// run` against an in-process broker, with its own access to the API server.
type replicator struct {
	t        *testing.T
	kube     kubernetes.Interface
	name     string // the handler's name; its hold is tether.dev/<name>
	src      string // the sources' namespace
	leaseNS  string // the broker's namespace, where the presence Leases are
	argv     []string
	env      []string
	h        *handlerProcess // the last one started
	starts   int
	killedAt time.Time
}

// startReplicator starts a broker with a short grace and the replicator,
// serving sources in src, and waits until it is connected. The broker's
// Leases go to a namespace of the test's own, so that it restores no
// handler of another test.
func startReplicator(t *testing.T, cp *controlplane.ControlPlane, name, src string) *replicator {
	t.Helper()
	leaseNS := cp.Namespace(t)
	b := startBroker(t, cp, "127.0.0.1:0", func(o *broker.Options) {
		o.Absence.Grace, o.Namespace = replicatorGrace, leaseNS
	})
	script, err := filepath.Abs(filepath.Join(sdkDir, "examples", "replicator.py"))
	if err != nil {
		t.Fatal(err)
	}
	r := &replicator{t: t, kube: cp.Client(), name: name, src: src, leaseNS: leaseNS,
		// -E -s -B -u: -I without -P, since -m must find the SDK in the
		// working directory; `tether run` puts the file's folder (and kube.py)
		// on sys.path.
		argv: []string{"-E", "-s", "-B", "-u", "-m", "tether", "run", script,
			"--broker", b.addr, "--insecure", "--name", name, "--namespace", src, "--max-backoff", "1s"},
		// The reconcile timer keeps its 30 s: its first tick comes after
		// the story, as in the demo.
		env: append(os.Environ(), "KUBECONFIG="+writeJSONKubeconfig(t, cp)),
	}
	r.start()
	return r
}

// start starts the replicator (again) and waits until the broker counts it.
func (r *replicator) start() {
	r.t.Helper()
	r.starts++
	cmd := exec.Command(python, r.argv...)
	cmd.Dir, cmd.Env = sdkDir, r.env
	r.h = startProcess(r.t, fmt.Sprintf("%s#%d", r.name, r.starts), cmd)
	r.h.stderr.wait(r.t, "connected to the broker", 1)
	r.waitInstances(1)
}

// kill kills the replicator with SIGKILL and waits until the broker counts
// no instance of it.
func (r *replicator) kill() {
	r.t.Helper()
	if err := r.h.cmd.Process.Kill(); err != nil {
		r.t.Fatal(err)
	}
	r.killedAt = time.Now()
	r.h.waitExit(r.t, waitTimeout)
	r.waitInstances(0)
}

// waitInstances waits until the handler's presence Lease counts n
// connected instances, as the demo does.
func (r *replicator) waitInstances(n int) {
	r.t.Helper()
	lease := presence.LeaseName(r.name)
	eventually(r.t, fmt.Sprintf("Lease %s/%s to count %d instance(s)", r.leaseNS, lease, n), func() bool {
		l, err := r.kube.CoordinationV1().Leases(r.leaseNS).Get(context.Background(), lease, metav1.GetOptions{})
		return err == nil && l.Annotations[annInstances] == strconv.Itoa(n)
	})
}

// writeJSONKubeconfig writes the control plane's admin access as a JSON
// kubeconfig (kube.py reads no YAML) and returns its path.
func writeJSONKubeconfig(t *testing.T, cp *controlplane.ControlPlane) string {
	t.Helper()
	rc := cp.RESTConfig()
	cluster := map[string]any{"server": rc.Host}
	if len(rc.CAData) > 0 {
		cluster["certificate-authority-data"] = base64.StdEncoding.EncodeToString(rc.CAData)
	} else {
		cluster["insecure-skip-tls-verify"] = true
	}
	data, err := json.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config", "current-context": "tether",
		"clusters": []any{map[string]any{"name": "tether", "cluster": cluster}},
		"users":    []any{map[string]any{"name": "admin", "user": map[string]any{"token": rc.BearerToken}}},
		"contexts": []any{map[string]any{"name": "tether", "context": map[string]any{"cluster": "tether", "user": "admin"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "kubeconfig.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestPythonReplicatorReplicatesFollowsAndCleansUp plays the demo's
// replicate, update and deleteSource steps: copies in the two included
// namespaces and not in the excluded one, labelled and annotated as the
// example says, the source held; an update followed; on delete the copies
// go before the source does.
func TestPythonReplicatorReplicatesFollowsAndCleansUp(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	src, t1, t2, excluded := cp.Namespace(t), cp.Namespace(t), cp.Namespace(t), cp.Namespace(t)
	r := startReplicator(t, cp, "py-replicator", src)
	const name = "db-credentials"
	key := src + "/" + name

	// 1. Replicate. The excluded namespace is in both lists, as in the demo.
	r.createSecret(name, map[string]string{
		annEnabled: "true", annInclude: strings.Join([]string{t1, t2, excluded}, ","), annExclude: excluded,
		"example.com/owner": "team-a",
	}, "hunter2")
	r.waitCopies(name, "hunter2", t1, t2)
	s := r.waitSecret(name, "held and handled", func(s *corev1.Secret) bool {
		return s != nil && slices.Contains(s.Finalizers, hold.Finalizer(r.name)) &&
			s.Annotations[progress.LastHandledKey(r.name)] != ""
	})
	t.Logf("source %s: finalizers %v", key, s.Finalizers)
	// The create has been acked: every copy there will be is there.
	copies := r.copiesOf(key)
	if got := namespacesOf(copies); !slices.Equal(got, sorted(t1, t2)) {
		t.Errorf("copies of %s in %v, want exactly %v (none in the excluded %s)", key, got, sorted(t1, t2), excluded)
	}
	for _, c := range copies {
		if c.Labels[labelCopy] != "true" || c.Labels["app"] != "db" {
			t.Errorf("copy %s/%s: labels %v, want the source's plus %s=true", c.Namespace, c.Name, c.Labels, labelCopy)
		}
		want := map[string]string{annSource: key, "example.com/owner": "team-a"}
		if !maps.Equal(c.Annotations, want) {
			t.Errorf("copy %s/%s: annotations %v, want %v (the source's without tether.dev ones, plus the source)",
				c.Namespace, c.Name, c.Annotations, want)
		}
		if len(c.Finalizers) > 0 {
			t.Errorf("copy %s/%s is held: %v", c.Namespace, c.Name, c.Finalizers)
		}
	}

	// 2. Update: the copies follow.
	patch := `{"stringData":{"password":"correct-horse"}}`
	if _, err := r.kube.CoreV1().Secrets(src).Patch(context.Background(), name, types.StrategicMergePatchType,
		[]byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("updating %s: %v", key, err)
	}
	r.waitCopies(name, "correct-horse", t1, t2)
	if _, err := r.kube.CoreV1().Secrets(excluded).Get(context.Background(), name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("%s/%s: want no copy in the excluded namespace, got %v", excluded, name, err)
	}

	// 3. Delete: the delete binding removes the copies, its ack the hold.
	r.deleteSecret(name)
	r.waitGoneAfterCopies(name)
}

// TestPythonReplicatorWaitsWithinGraceAndIsReleasedAfter plays the demo's
// handlerAbsent step: a held source deleted while the replicator is killed
// stays Terminating, and is cleaned up by the replicator started again
// within its grace; past the grace the broker releases the next one without
// the handler, with a HoldReleased Event, and its copy stays behind.
func TestPythonReplicatorWaitsWithinGraceAndIsReleasedAfter(t *testing.T) {
	needPython(t)
	cp := controlplane.Get(t)
	src, target := cp.Namespace(t), cp.Namespace(t)
	r := startReplicator(t, cp, "py-replicator-grace", src)
	const held, graced = "api-token", "cache-key"
	for _, name := range []string{held, graced} {
		r.createSecret(name, map[string]string{annEnabled: "true", annInclude: target}, "t0k3n")
		r.waitCopies(name, "t0k3n", target)
		r.waitSecret(name, "held", func(s *corev1.Secret) bool {
			return s != nil && slices.Contains(s.Finalizers, hold.Finalizer(r.name))
		})
	}

	// 4. Killed, back within the grace: the delete waits for it.
	r.kill()
	r.deleteSecret(held)
	r.staysTerminating(held, target)
	r.start()
	r.waitGoneAfterCopies(held)
	r.h.stderr.wait(t, "["+src+"/"+held+"] source deleted; copies removed: 1", 1)

	// 5. Killed and away past the grace: the broker lets the source go.
	r.kill()
	r.deleteSecret(graced)
	r.waitSecret(graced, "gone", func(s *corev1.Secret) bool { return s == nil })
	if took := time.Since(r.killedAt); took < replicatorGrace {
		t.Errorf("%s/%s was released %v after the handler was killed, within its %v grace", src, graced, took, replicatorGrace)
	}
	// The Event is posted after the release, by the broker's recorder.
	var events *corev1.EventList
	eventually(t, "a HoldReleased Event about "+src+"/"+graced, func() bool {
		var err error
		events, err = r.kube.CoreV1().Events(src).List(context.Background(), metav1.ListOptions{
			FieldSelector: "involvedObject.name=" + graced + ",reason=HoldReleased"})
		return err == nil && len(events.Items) > 0
	})
	t.Logf("Event %s: %s", events.Items[0].Reason, events.Items[0].Message)
	if got := namespacesOf(r.copiesOf(src + "/" + graced)); !slices.Equal(got, []string{target}) {
		t.Errorf("copies of %s/%s left behind in %v, want %v: its delete never ran (HOLD)", src, graced, got, []string{target})
	}
}

func (r *replicator) createSecret(name string, annotations map[string]string, password string) {
	r.t.Helper()
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: r.src, Annotations: annotations, Labels: map[string]string{"app": "db"}},
		Data:       map[string][]byte{"password": []byte(password)},
	}
	if _, err := r.kube.CoreV1().Secrets(r.src).Create(context.Background(), s, metav1.CreateOptions{}); err != nil {
		r.t.Fatalf("creating Secret %s/%s: %v", r.src, name, err)
	}
}

func (r *replicator) deleteSecret(name string) {
	r.t.Helper()
	if err := r.kube.CoreV1().Secrets(r.src).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		r.t.Fatalf("deleting Secret %s/%s: %v", r.src, name, err)
	}
}

// getSecret reads a source; nil when it does not exist.
func (r *replicator) getSecret(ns, name string) *corev1.Secret {
	r.t.Helper()
	s, err := r.kube.CoreV1().Secrets(ns).Get(context.Background(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		r.t.Fatalf("getting Secret %s/%s: %v", ns, name, err)
	}
	return s
}

// waitSecret waits until the source satisfies cond (nil: it does not exist).
func (r *replicator) waitSecret(name, what string, cond func(*corev1.Secret) bool) *corev1.Secret {
	r.t.Helper()
	var s *corev1.Secret
	eventually(r.t, fmt.Sprintf("Secret %s/%s: %s", r.src, name, what), func() bool {
		s = r.getSecret(r.src, name)
		return cond(s)
	})
	return s
}

// waitCopies waits until the source's copies in the targets name it and
// carry password.
func (r *replicator) waitCopies(name, password string, targets ...string) {
	r.t.Helper()
	eventually(r.t, fmt.Sprintf("copies of %s/%s with password=%s in %v", r.src, name, password, targets), func() bool {
		for _, ns := range targets {
			c := r.getSecret(ns, name)
			if c == nil || c.Annotations[annSource] != r.src+"/"+name || string(c.Data["password"]) != password {
				return false
			}
		}
		return true
	})
}

// waitGoneAfterCopies waits until the source is gone, and then finds no
// copy of it: the hold kept it until its copies were deleted.
func (r *replicator) waitGoneAfterCopies(name string) {
	r.t.Helper()
	r.waitSecret(name, "gone", func(s *corev1.Secret) bool { return s == nil })
	if left := namespacesOf(r.copiesOf(r.src + "/" + name)); len(left) > 0 {
		r.t.Errorf("%s/%s is gone but its copies in %v are not", r.src, name, left)
	}
}

// staysTerminating watches a source deleted while the handler is away for
// staysFor: it stays, Terminating with the hold, and so does its copy.
func (r *replicator) staysTerminating(name, target string) {
	r.t.Helper()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for deadline := time.Now().Add(staysFor); ; <-tick.C {
		s := r.getSecret(r.src, name)
		if s == nil {
			r.t.Fatalf("%s/%s went while the handler was away, within its grace", r.src, name)
		}
		if s.DeletionTimestamp == nil || !slices.Contains(s.Finalizers, hold.Finalizer(r.name)) {
			r.t.Fatalf("%s/%s with the handler away: want it Terminating with the hold, got deletionTimestamp %v, finalizers %v",
				r.src, name, s.DeletionTimestamp, s.Finalizers)
		}
		if r.getSecret(target, name) == nil {
			r.t.Fatalf("the copy %s/%s went while the handler was away", target, name)
		}
		if !time.Now().Before(deadline) {
			break
		}
	}
	r.t.Logf("%s/%s stayed Terminating with the hold for %v, the handler away", r.src, name, staysFor)
}

// copiesOf lists the copies of the source key in every namespace.
func (r *replicator) copiesOf(key string) []corev1.Secret {
	r.t.Helper()
	list, err := r.kube.CoreV1().Secrets("").List(context.Background(), metav1.ListOptions{LabelSelector: labelCopy + "=true"})
	if err != nil {
		r.t.Fatalf("listing copies: %v", err)
	}
	var out []corev1.Secret
	for _, s := range list.Items {
		if s.Annotations[annSource] == key {
			out = append(out, s)
		}
	}
	return out
}

// namespacesOf returns the copies' namespaces, sorted.
func namespacesOf(copies []corev1.Secret) []string {
	var out []string
	for _, c := range copies {
		out = append(out, c.Namespace)
	}
	return sorted(out...)
}

func sorted(s ...string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}
