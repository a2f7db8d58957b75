package controlplane

import (
	"context"
	"net/http"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/Shopify/toxiproxy/v2"
	"github.com/Shopify/toxiproxy/v2/collectors"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// TestRestartEtcdKeepsDataAndWatchesGoOn: after an etcd restart the API
// server serves reads and writes again, with the data of before, and a
// watch opened before the restart goes on without a relist: the API
// server's watch cache resumes its etcd watch where it was.
func TestRestartEtcdKeepsDataAndWatchesGoOn(t *testing.T) {
	cp := startForTest(t)
	ctx := context.Background()
	cms := cp.Client().CoreV1().ConfigMaps("default")
	before := createConfigMap(t, cms, "before")
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	if err := cp.RestartEtcd(ctx); err != nil {
		t.Fatal(err)
	}
	servesAgain(t, cms, "restart")
	ev := next(t, w, 30*time.Second)
	if cm, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Added || !ok || cm.Name != "after" {
		t.Fatalf("the watch from before the restart got %s %T, want the object created after it added", ev.Type, ev.Object)
	}
}

// TestCompactExpiresWhatEtcdServesButNotTheWatchCache: after a compaction
// a watch that etcd serves (Events have no watch cache) resumed from before
// it is answered 410 Gone, while a watch of ConfigMaps from the same
// resource version is served from the watch cache, with an update etcd no
// longer has. This is why a compaction alone makes no informer relist, and
// the chaos run's compaction fault cuts the API server off from etcd while
// it compacts ahead.
func TestCompactExpiresWhatEtcdServesButNotTheWatchCache(t *testing.T) {
	cp := startForTest(t)
	ctx := context.Background()
	cms := cp.Client().CoreV1().ConfigMaps("default")
	cm := createConfigMap(t, cms, "compacted")
	rv := cm.ResourceVersion
	// Two updates: a watch from rv starts at rv+1, which a compaction at
	// rv+1 would keep.
	for i := range 2 {
		cm.Data = map[string]string{"i": strconv.Itoa(i)}
		var err error
		if cm, err = cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	rev, err := cp.Compact(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if latest, _ := strconv.ParseInt(cm.ResourceVersion, 10, 64); rev < latest {
		t.Fatalf("compacted at revision %d, before the last write (%d)", rev, latest)
	}
	if again, err := cp.Compact(ctx); err != nil || again < rev {
		t.Fatalf("compacting again: revision %d, %v; want %d or later, no error", again, err, rev)
	}

	events, err := cp.Client().CoreV1().Events("default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	requireGone(t, "a watch of Events from before the compaction", events, err)

	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatalf("a watch of ConfigMaps from before the compaction: %v, want it served from the watch cache", err)
	}
	defer w.Stop()
	ev := next(t, w, 30*time.Second)
	if got, ok := ev.Object.(*corev1.ConfigMap); ev.Type != watch.Modified || !ok || got.Data["i"] != "0" {
		t.Fatalf("a watch of ConfigMaps from before the compaction got %s %T, want the first update, from the watch cache", ev.Type, ev.Object)
	}
}

// TestCompactAheadWhileCutOffEndsWatchesAndTheyMustRelist: with the API
// server cut off from etcd (the proxy between them stopped, which closes
// its connections), a compaction ahead, and the way back open again, a
// watch opened before is ended, a watch resumed from its resource version
// is answered 410 Gone (the watch cache listed again, past it), and the API
// server serves reads and writes. This is the chaos run's etcd-compact
// fault. The ConfigMap is the last write before the cut: its resource's
// etcd watch is the one a compaction at the last revision alone would
// spare.
func TestCompactAheadWhileCutOffEndsWatchesAndTheyMustRelist(t *testing.T) {
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	srv.Metrics.ProxyMetrics = collectors.NewProxyMetricCollectors()
	var proxy *toxiproxy.Proxy
	cp := startForTestWith(t, Options{EtcdVia: func(etcd string) (string, error) {
		proxy = toxiproxy.NewProxy(srv, "apiserver->etcd", "127.0.0.1:0", etcd)
		if err := proxy.Start(); err != nil {
			return "", err
		}
		t.Cleanup(proxy.Stop)
		return proxy.Listen, nil
	}})
	ctx := context.Background()
	cms := cp.Client().CoreV1().ConfigMaps("default")
	before := createConfigMap(t, cms, "before")
	w, err := cms.Watch(ctx, metav1.ListOptions{ResourceVersion: before.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	proxy.Stop()
	rev, err := cp.CompactAhead(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	if latest, _ := strconv.ParseInt(before.ResourceVersion, 10, 64); rev < latest+2 {
		t.Fatalf("compacted at revision %d, want two past the last write (%d)", rev, latest)
	}
	ended := time.NewTimer(30 * time.Second)
	defer ended.Stop()
	for open := true; open; {
		select {
		case _, open = <-w.ResultChan():
		case <-ended.C:
			t.Fatal("the watch opened before the compaction still runs 30s after it, want it ended")
		}
	}
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := AwaitWatchExpired(waitCtx, before.ResourceVersion, cms.Watch); err != nil {
		t.Fatal(err)
	}
	servesAgain(t, cms, "compaction")
}

func createConfigMap(t *testing.T, cms typedcorev1.ConfigMapInterface, name string) *corev1.ConfigMap {
	t.Helper()
	cm, err := cms.Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// requireGone fails the test unless the watch w, opened with err, was
// answered 410 Gone.
func requireGone(t *testing.T, what string, w watch.Interface, err error) {
	t.Helper()
	if err != nil {
		if !apierrors.IsResourceExpired(err) && !apierrors.IsGone(err) {
			t.Fatalf("%s: %v, want 410 Gone", what, err)
		}
		return
	}
	defer w.Stop()
	ev := next(t, w, 30*time.Second)
	if status, ok := ev.Object.(*metav1.Status); ev.Type != watch.Error || !ok || status.Code != http.StatusGone {
		t.Fatalf("%s got %s %T, want an error 410 Gone", what, ev.Type, ev.Object)
	}
}

// eventually retries f every 100ms until it succeeds, for at most 30s.
func eventually(t *testing.T, what string, f func(context.Context) error) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = f(ctx)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s: not within 30s: %v", what, last)
	}
}

// next is the next event of w, within timeout.
func next(t *testing.T, w watch.Interface, timeout time.Duration) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("the watch ended, want an event")
		}
		return ev
	case <-time.After(timeout):
		t.Fatalf("no event within %v", timeout)
	}
	return watch.Event{}
}

// servesAgain waits until the API server reads the ConfigMap "before" and
// creates "after", after what was done to etcd.
func servesAgain(t *testing.T, cms typedcorev1.ConfigMapInterface, after string) {
	t.Helper()
	eventually(t, "reading the object made before the "+after, func(ctx context.Context) error {
		_, err := cms.Get(ctx, "before", metav1.GetOptions{})
		return err
	})
	eventually(t, "creating an object after the "+after, func(ctx context.Context) error {
		_, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) { // an attempt whose answer was lost
			return nil
		}
		return err
	})
}
