package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/kube"
)

// CANamespaceLabel on a namespace asks the broker whose namespace is the
// label's value to publish its CA bundle there too, in a ConfigMap of the
// same name as in its own namespace, for handlers of that namespace to
// mount (a Pod mounts only ConfigMaps of its own namespace). The broker
// holds no right on ConfigMaps outside its namespace: the namespace's
// install grants it get and update on that ConfigMap by name (and ships it
// empty, or grants create too). As kube-root-ca.crt, but only where asked.
const CANamespaceLabel = "tether.dev/broker-ca"

// Waits before writing a namespace's CA bundle again: after a failed
// write, and after a namespace that asks for it refused the broker the
// right (so that a grant made later is found without a restart).
const (
	caPublishRetry = 10 * time.Second
	caDeniedRetry  = time.Minute
)

// caPublisher keeps the ConfigMap name holding the CA bundle in the
// broker's namespace ns and in every namespace labelled
// CANamespaceLabel=ns: at once, on every change of the bundle (a rotation
// publishes the new CA beside the old one), when a namespace comes to ask,
// and again after a failed write. Every replica writes it; they write the
// same bundle. A namespace that asks but grants no right is told once in
// the log and tried again every deniedRetry; nothing else waits for it.
type caPublisher struct {
	kube    kube.Interface
	ns      string
	name    string
	bundle  func() []byte
	changed <-chan struct{}
	log     hclog.Logger
	// retry and deniedRetry default to caPublishRetry and caDeniedRetry.
	retry, deniedRetry time.Duration

	// denied are the namespaces that refused the broker the write, each
	// logged once until it succeeds; only the worker touches it.
	denied map[string]bool
	asking cache.Store
}

// newCAPublisher publishes s's CA bundle in the ConfigMap name.
func newCAPublisher(kube kube.Interface, ns, name string, s *certs.Serving, log hclog.Logger) *caPublisher {
	return &caPublisher{kube: kube, ns: ns, name: name, bundle: s.CABundle, changed: s.Changed(), log: log.Named("ca-publisher")}
}

// Start publishes until ctx ends.
func (p *caPublisher) Start(ctx context.Context) error {
	if p.retry == 0 {
		p.retry = caPublishRetry
	}
	if p.deniedRetry == 0 {
		p.deniedRetry = caDeniedRetry
	}
	p.denied = map[string]bool{}
	queue := workqueue.NewTypedDelayingQueue[string]()
	inf, err := p.namespaces(queue)
	if err != nil {
		return err
	}
	p.asking = inf.GetStore()
	go inf.Run(ctx.Done())
	go func() {
		defer queue.ShutDown()
		queue.Add(p.ns)
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.changed:
				queue.Add(p.ns)
				for _, ns := range p.asking.ListKeys() {
					queue.Add(ns)
				}
			}
		}
	}()
	for {
		ns, shutdown := queue.Get()
		if shutdown {
			return nil
		}
		if delay := p.publish(ctx, ns); delay > 0 {
			queue.AddAfter(ns, delay)
		}
		queue.Done(ns)
	}
}

// namespaces is an informer on the namespaces that ask for the bundle,
// which puts each on queue when it comes to ask or changes.
func (p *caPublisher) namespaces(queue workqueue.TypedDelayingInterface[string]) (cache.SharedIndexInformer, error) {
	selector := CANamespaceLabel + "=" + p.ns
	nss := p.kube.CoreV1().Namespaces()
	// With the client's view of watch lists, as client-go's informer
	// factory: the fake clientset of the tests has none.
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return nss.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return nss.Watch(ctx, o)
		},
	}, p.kube), &corev1.Namespace{}, 0, cache.Indexers{})
	logged := false
	if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if !logged && apierrors.IsForbidden(err) {
			logged = true
			p.log.Warn("cannot list namespaces: the CA bundle is published in the broker's namespace only, not in those labelled for it; grant list and watch on namespaces (deploy/broker/rbac.yaml)",
				"label", selector, "error", err)
		}
	}); err != nil {
		return nil, fmt.Errorf("watching the namespaces that ask for the CA bundle: %w", err)
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			queue.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("watching the namespaces that ask for the CA bundle: %w", err)
	}
	return inf, nil
}

// publish writes the bundle into ns if ns is the broker's namespace or
// asks for it, and returns how long to wait before trying again (0: not).
func (p *caPublisher) publish(ctx context.Context, ns string) time.Duration {
	if ns != p.ns && !p.asks(ns) {
		delete(p.denied, ns) // no longer labelled, or gone: the ConfigMap is its install's
		return 0
	}
	err := writeCA(ctx, p.kube, ns, p.name, p.bundle())
	ref := ns + "/" + p.name
	switch {
	case ctx.Err() != nil:
		return 0
	case err == nil:
		if p.denied[ns] {
			delete(p.denied, ns)
			p.log.Info("published the CA bundle", "configmap", ref)
		}
		return 0
	case ns != p.ns && apierrors.IsForbidden(err):
		if !p.denied[ns] {
			p.denied[ns] = true
			p.log.Warn("a namespace asks for the CA bundle but does not let the broker write it; grant get and update on this ConfigMap (and create, unless it is shipped)",
				"configmap", ref, "label", CANamespaceLabel+"="+p.ns, "error", err, "retry", p.deniedRetry)
		}
		return p.deniedRetry
	default:
		p.log.Warn("cannot publish the CA bundle; retrying", "configmap", ref, "error", err, "delay", p.retry)
		return p.retry
	}
}

// asks tells whether the namespace ns carries the label for this broker.
func (p *caPublisher) asks(ns string) bool {
	obj, ok, err := p.asking.GetByKey(ns)
	if err != nil || !ok {
		return false
	}
	n, isNS := obj.(*corev1.Namespace)
	return isNS && n.Labels[CANamespaceLabel] == p.ns && n.DeletionTimestamp == nil
}

// writeCA makes the ConfigMap hold bundle, creating it when needed; a
// replica that wrote it meanwhile is read again.
func writeCA(ctx context.Context, kube kube.Interface, ns, name string, bundle []byte) error {
	if len(bundle) == 0 {
		return nil // a given certificate without a CA file: clients use their system roots
	}
	cms := kube.CoreV1().ConfigMaps(ns)
	ref := ns + "/" + name
	for range certs.MaxSecretAttempts {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
					"app.kubernetes.io/name": "tether-broker", "app.kubernetes.io/component": "grpc",
				}},
				Data: map[string]string{CAConfigMapKey: string(bundle)},
			}, metav1.CreateOptions{})
		case err != nil:
			return fmt.Errorf("reading ConfigMap %s: %w", ref, err)
		case cm.Data[CAConfigMapKey] == string(bundle):
			return nil
		default:
			cm = cm.DeepCopy()
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[CAConfigMapKey] = string(bundle)
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue // another replica wrote it meanwhile: look again
		}
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil // an uninstall, or the namespace going: no handler is to connect there any more
		}
		if err != nil {
			return fmt.Errorf("publishing the CA bundle in ConfigMap %s: %w", ref, err)
		}
		return nil
	}
	return fmt.Errorf("ConfigMap %s changed %d times while the CA bundle was being written", ref, certs.MaxSecretAttempts)
}
