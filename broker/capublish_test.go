package broker

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// logBuffer is an hclog output the test reads while the publisher writes.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) count(s string) int { return strings.Count(b.String(), s) }

func labelled(name string, labels map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
}

// TestCAPublisherWritesWhereAskedAndGranted: the bundle goes into the
// broker's namespace and into each namespace labelled for this broker that
// lets it write; not into a namespace labelled for another broker or not
// labelled. A namespace that asks but refuses is logged once however often
// it is tried, gets the bundle once it grants the right, and never holds
// up the others; a new bundle (a rotation) reaches every namespace.
func TestCAPublisherWritesWhereAskedAndGranted(t *testing.T) {
	const own = "tether-system"
	kube := fake.NewClientset(
		labelled(own, nil),
		labelled("granted", map[string]string{CANamespaceLabel: own}),
		labelled("refused", map[string]string{CANamespaceLabel: own}),
		labelled("elsewhere", map[string]string{CANamespaceLabel: "other-broker"}),
		labelled("plain", nil),
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: DefaultCAConfigMap, Namespace: "granted"}},
	)
	var refusing atomic.Bool
	var refusedTries atomic.Int32
	refusing.Store(true)
	kube.PrependReactor("*", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetNamespace() != "refused" || !refusing.Load() {
			return false, nil, nil
		}
		refusedTries.Add(1)
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, DefaultCAConfigMap, nil)
	})
	var bundle atomic.Value
	bundle.Store([]byte("first CA"))
	changed := make(chan struct{}, 1)
	var logs logBuffer
	p := &caPublisher{
		kube: kubetest.Wrap(kube), ns: own, name: DefaultCAConfigMap, changed: changed,
		bundle: func() []byte { return bundle.Load().([]byte) },
		log:    hclog.New(&hclog.LoggerOptions{Output: &logs}),
		retry:  10 * time.Millisecond, deniedRetry: 10 * time.Millisecond,
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- p.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()

	published := func(ns string) string {
		cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, DefaultCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return cm.Data[CAConfigMapKey]
	}
	waitFor(t, "the first CA in the broker's namespace and the granted one", func() bool {
		return published(own) == "first CA" && published("granted") == "first CA"
	})
	waitFor(t, "the refusing namespace tried three times", func() bool { return refusedTries.Load() >= 3 })
	const refusedLine = "does not let the broker write it"
	if n := logs.count(refusedLine); n != 1 {
		t.Errorf("the refusal was logged %d times, want once:\n%s", n, logs.String())
	}
	for _, ns := range []string{"elsewhere", "plain"} {
		if _, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, DefaultCAConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap in %s: %v, want none: it did not ask this broker", ns, err)
		}
	}

	bundle.Store([]byte("first CA\nsecond CA"))
	changed <- struct{}{}
	waitFor(t, "the rotated bundle everywhere it is published", func() bool {
		return published(own) == "first CA\nsecond CA" && published("granted") == "first CA\nsecond CA"
	})

	refusing.Store(false)
	waitFor(t, "the bundle in the namespace once it grants the right", func() bool { return published("refused") == "first CA\nsecond CA" })
	waitFor(t, "the grant noticed in the log", func() bool { return logs.count("published the CA bundle") == 1 })
}

// waitFor polls cond until it holds, failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(t.Context(), 5*time.Millisecond, 10*time.Second, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("waiting for %s: %v", what, err)
	}
}
