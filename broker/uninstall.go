package broker

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// watchUninstall watches the broker's own Deployment and reports true once
// it is being deleted (or is gone after having been seen), false when ctx
// ends first. A Deployment that was never seen is not taken as an
// uninstall: a wrong name must not release anything.
func watchUninstall(ctx context.Context, kube kubernetes.Interface, namespace, name string, log hclog.Logger) bool {
	lw := cache.NewListWatchFromClient(kube.AppsV1().RESTClient(), "deployments", namespace,
		fields.OneTermEqualSelector("metadata.name", name))
	deleting := make(chan struct{})
	var seen atomic.Bool
	check := func(obj any) {
		d, ok := obj.(*appsv1.Deployment)
		if !ok {
			return
		}
		seen.Store(true)
		if d.DeletionTimestamp != nil {
			closeOnce(deleting)
		}
	}
	inf := cache.NewSharedIndexInformer(lw, &appsv1.Deployment{}, 0, cache.Indexers{})
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    check,
		UpdateFunc: func(_, obj any) { check(obj) },
		DeleteFunc: func(any) {
			if seen.Load() {
				closeOnce(deleting)
			}
		},
	})
	if err != nil {
		log.Error("cannot watch the broker's Deployment; uninstall will not release holds", "error", err)
		return false
	}
	go inf.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return false
	}
	if !seen.Load() {
		log.Warn("the broker's Deployment was not found; uninstall detection is off until it appears",
			"namespace", namespace, "deployment", name)
	}
	select {
	case <-deleting:
		return true
	case <-ctx.Done():
		return false
	}
}

func closeOnce(c chan struct{}) {
	select {
	case <-c:
	default:
		close(c)
	}
}

// ensureNamespace creates the broker's namespace when it is missing, as it
// is on a fresh local control plane.
func ensureNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return err
	}
	_, err = kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func metaFor(name, namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: namespace}
}
