package broker

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/tether-dev/tether/broker/guard"
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
	if seen.Load() {
		log.Info("watching the broker's Deployment: deleting it uninstalls the broker", "namespace", namespace, "deployment", name)
	} else {
		log.Warn("the broker's Deployment was not found; uninstall detection is off until it appears",
			"namespace", namespace, "deployment", name)
	}
	select {
	case <-deleting:
		return true
	case <-ctx.Done():
		// `kubectl delete` of the Deployment reaches the broker as a SIGTERM,
		// which may come before the watch shows the Deployment gone: look
		// once more, directly, before stopping as for a restart. A namespace
		// deletion deletes the Pods, often before the Deployment: the
		// namespace itself says so then.
		return (seen.Load() && deploymentGone(kube, namespace, name, log)) || namespaceDeleting(kube, namespace, log)
	}
}

// finalLook bounds the last look at the Deployment when the broker stops.
const finalLook = 10 * time.Second

// deploymentGone reports whether the Deployment is gone or being deleted.
// An error says nothing: the broker then stops as for a restart.
func deploymentGone(kube kubernetes.Interface, namespace, name string, log hclog.Logger) bool {
	ctx, cancel := context.WithTimeout(context.Background(), finalLook)
	defer cancel()
	d, err := kube.AppsV1().Deployments(namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		log.Warn("cannot look at the broker's Deployment before stopping; stopping as for a restart", "error", err)
		return false
	}
	return d.DeletionTimestamp != nil
}

// namespaceDeleting reports whether the broker's namespace is being
// deleted (rule 3f). An error says nothing, as for deploymentGone.
func namespaceDeleting(kube kubernetes.Interface, namespace string, log hclog.Logger) bool {
	ctx, cancel := context.WithTimeout(context.Background(), finalLook)
	defer cancel()
	ns, err := kube.CoreV1().Namespaces().Get(ctx, namespace, metav1.GetOptions{})
	if err != nil {
		log.Warn("cannot look at the broker's namespace before stopping; stopping as for a restart", "error", err)
		return false
	}
	if ns.DeletionTimestamp != nil {
		log.Info("the broker's namespace is being deleted: uninstalling", "namespace", namespace)
	}
	return ns.DeletionTimestamp != nil
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

// uninstallMarker is a Lease in the broker's namespace that the leader
// renews when it begins an uninstall, naming its Deployment. With leader
// election, the replica that leads next finds it and finishes the uninstall
// instead of dispatching: by then the Deployment may be gone, and a
// Deployment never seen is otherwise not taken as an uninstall (a wrong
// --deployment must not release anything). The marker is never deleted (the
// broker has no delete on Leases); it counts only when recent and for the
// same Deployment.
const uninstallMarker = "tether-broker-uninstalling"

// uninstallMarkerTTL is how long a marker counts: an uninstall ends within
// the Pod's termination grace period, well inside it.
const uninstallMarkerTTL = 10 * time.Minute

const annUninstallDeployment = "tether.dev/deployment"

// markUninstall renews the uninstall marker; failing to is logged, since
// the uninstall goes on regardless.
func (b *Broker) markUninstall(kube kubernetes.Interface) {
	if !b.opts.LeaderElection.Enabled {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases := kube.CoordinationV1().Leases(b.opts.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, uninstallMarker, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: metaFor(uninstallMarker, b.opts.Namespace)}
		} else if err != nil {
			return err
		}
		holder, now := b.opts.Identity, metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime = &holder, &now
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, annUninstallDeployment, b.opts.Deployment)
		if l.ResourceVersion == "" {
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else {
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		b.log.Warn("cannot mark the uninstall for the other replicas", "error", err)
	}
}

// uninstallUnderWay reports whether another replica began an uninstall that
// the cluster still confirms: a recent marker for this Deployment, and the
// Deployment being deleted or gone.
func (b *Broker) uninstallUnderWay(ctx context.Context, kube kubernetes.Interface) bool {
	if !b.opts.LeaderElection.Enabled || b.opts.Deployment == "" {
		return false
	}
	l, err := kube.CoordinationV1().Leases(b.opts.Namespace).Get(ctx, uninstallMarker, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			b.log.Warn("cannot read the uninstall marker", "error", err)
		}
		return false
	}
	if l.Annotations[annUninstallDeployment] != b.opts.Deployment || l.Spec.RenewTime == nil ||
		time.Since(l.Spec.RenewTime.Time) > uninstallMarkerTTL {
		return false // an earlier uninstall, of a Deployment installed again since
	}
	d, err := kube.AppsV1().Deployments(b.opts.Namespace).Get(ctx, b.opts.Deployment, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		b.log.Warn("cannot read the broker's Deployment", "error", err)
		return false
	}
	return d.DeletionTimestamp != nil
}

// guardUninstall puts the uninstall guard on what the broker needs in its
// namespace to release its holds (package guard). Without it an uninstall
// by namespace deletion can leave every hold in place; the broker goes on
// all the same.
func (b *Broker) guardUninstall(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) {
	lease := ""
	if le := b.opts.LeaderElection.withDefaults(); le.Enabled {
		lease = le.LeaseName
	}
	refs, sa, err := guard.Guarded(ctx, kube, b.opts.Namespace, lease)
	if err == nil {
		err = guard.Protect(ctx, dyn, b.opts.Namespace, refs)
	}
	if err == nil && sa != "" {
		err = guard.Grant(ctx, kube, b.opts.Namespace, sa)
	}
	if err != nil {
		if ctx.Err() == nil {
			b.log.Warn("cannot guard what an uninstall needs: deleting the namespace may leave holds", "error", err)
		}
		return
	}
	b.log.Info("uninstall guard on", "objects", fmt.Sprint(refs), "grant", sa != "")
}

// unguardUninstall takes the uninstall guard off (package guard), then
// revokes the broker's grant: last, since it may take the permissions that
// let the broker do the rest. The revoke is refused when the ServiceAccount
// went with the guard; then the namespace is being deleted, and the garbage
// collector removes the grant once it is gone.
func (b *Broker) unguardUninstall(ctx context.Context, kube kubernetes.Interface, dyn dynamic.Interface) error {
	freed, err := guard.Unprotect(ctx, dyn, b.opts.Namespace)
	b.log.Info("uninstall: guard taken off", "objects", fmt.Sprint(freed))
	if err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	if err := guard.Revoke(ctx, kube, b.opts.Namespace); err != nil {
		b.log.Info("uninstall: the grant stays until the namespace is gone", "error", err)
	}
	return nil
}
