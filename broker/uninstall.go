package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/retry"

	"github.com/tether-dev/tether/broker/guard"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/release"
)

// watchUninstall watches the broker's own Deployment and reports true once
// it is being deleted (or is gone after having been seen), false when ctx
// ends first. A Deployment that was never seen is not taken as an
// uninstall: a wrong name must not release anything.
func watchUninstall(ctx context.Context, kube kube.Interface, namespace, name string, log hclog.Logger) bool {
	deployments := kube.AppsV1().Deployments(namespace)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = selector
			return deployments.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = selector
			return deployments.Watch(ctx, o)
		},
	}, kube)
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
func deploymentGone(kube kube.Interface, namespace, name string, log hclog.Logger) bool {
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
func namespaceDeleting(kube kube.Interface, namespace string, log hclog.Logger) bool {
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
func ensureNamespace(ctx context.Context, kube kube.Interface, name string) error {
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

// uninstaller is what the leader needs to uninstall the broker: mark the
// uninstall for the other replicas, guard what the release needs, and
// release every hold (rule 3f).
type uninstaller struct {
	opts     Options
	log      hclog.Logger
	metrics  *metrics.Metrics
	kube     kube.Interface
	dyn      dynamic.Interface // the write client, without a client-side limit
	store    *presence.Store
	recorder *eventRecorder
	adm      *admissionParts // nil without admission

	// mu orders guard's Grant and widenNow; sa is the ServiceAccount whose
	// grant guard made, "" before.
	mu sync.Mutex
	sa string
}

// run releases every hold the broker owns (rule 3f): those of known and of
// every handler recorded in a Lease. It runs after the dispatcher stopped,
// so nothing adds a hold back, with the write client: release.Run bounds how
// many writes go at once, and the uninstall must fit in the Pod's
// termination grace period.
func (u *uninstaller) run(known []presence.Record) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if u.adm != nil {
		// First, so that no webhook of a handler is left pointing at a
		// broker that is gone.
		removed, err := u.adm.hooks.RemoveAll(ctx)
		if err != nil {
			u.log.Error("uninstall: cannot remove every webhook configuration", "error", err)
		}
		u.log.Info("uninstall: webhook configurations removed", "count", len(removed))
	}
	u.log.Info("the broker is being uninstalled: releasing every hold before exiting")
	released, err := release.Run(ctx, release.Options{
		Client: u.dyn, Presence: u.store, Known: known, Log: u.log.Named("release"),
		Event: func(obj *unstructured.Unstructured, handler string) {
			u.metrics.Holds().Released(handler, metrics.ReleaseUninstall)
			u.recorder.Event(obj, false, "HoldReleased",
				fmt.Sprintf("the Tether broker is being uninstalled: hold of handler %q released (rule 3f)", handler))
		},
	})
	u.log.Info("uninstall: holds released", "count", len(released))
	if err != nil {
		err = fmt.Errorf("releasing holds on uninstall: %w", err)
	}
	// Whatever the release did: an exiting broker must not keep its
	// namespace from being deleted.
	return errors.Join(err, u.unguard(ctx))
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

// mark renews the uninstall marker; failing to is logged, since
// the uninstall goes on regardless.
func (u *uninstaller) mark() {
	if !u.opts.LeaderElection.Enabled {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leases := u.kube.CoordinationV1().Leases(u.opts.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, uninstallMarker, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l = &coordinationv1.Lease{ObjectMeta: metaFor(uninstallMarker, u.opts.Namespace)}
		} else if err != nil {
			return err
		}
		holder, now := u.opts.Identity, metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.RenewTime = &holder, &now
		metav1.SetMetaDataAnnotation(&l.ObjectMeta, annUninstallDeployment, u.opts.Deployment)
		if l.ResourceVersion == "" {
			_, err = leases.Create(ctx, l, metav1.CreateOptions{})
		} else {
			_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		}
		return err
	})
	if err != nil {
		u.log.Warn("cannot mark the uninstall for the other replicas", "error", err)
	}
}

// underWay reports whether another replica began an uninstall that
// the cluster still confirms: a recent marker for this Deployment, and the
// Deployment being deleted or gone.
func (u *uninstaller) underWay(ctx context.Context) bool {
	if !u.opts.LeaderElection.Enabled || u.opts.Deployment == "" {
		return false
	}
	l, err := u.kube.CoordinationV1().Leases(u.opts.Namespace).Get(ctx, uninstallMarker, metav1.GetOptions{})
	if err != nil {
		if !apierrors.IsNotFound(err) {
			u.log.Warn("cannot read the uninstall marker", "error", err)
		}
		return false
	}
	if l.Annotations[annUninstallDeployment] != u.opts.Deployment || l.Spec.RenewTime == nil ||
		time.Since(l.Spec.RenewTime.Time) > uninstallMarkerTTL {
		return false // an earlier uninstall, of a Deployment installed again since
	}
	d, err := u.kube.AppsV1().Deployments(u.opts.Namespace).Get(ctx, u.opts.Deployment, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true
	case err != nil:
		u.log.Warn("cannot read the broker's Deployment", "error", err)
		return false
	}
	return d.DeletionTimestamp != nil
}

// guard puts the uninstall guard on what the broker needs in its
// namespace to release its holds (package guard). Without it an uninstall
// by namespace deletion can leave every hold in place; the broker goes on
// all the same. It returns the broker's ServiceAccount, "" when it has
// none or the guard could not be put on.
func (u *uninstaller) guard(ctx context.Context) string {
	u.mu.Lock()
	defer u.mu.Unlock()
	refs, sa, err := guard.Guarded(ctx, u.kube, u.opts.Namespace, u.leaderLease())
	if err == nil {
		err = guard.Protect(ctx, u.dyn, u.opts.Namespace, refs)
	}
	if err == nil && sa != "" {
		err = guard.Grant(ctx, u.kube, u.opts.Namespace, sa)
	}
	if err == nil {
		u.sa = sa
	}
	if err != nil {
		if ctx.Err() == nil {
			u.log.Warn("cannot guard what an uninstall needs: deleting the namespace may leave holds", "error", err)
		}
		return ""
	}
	u.log.Info("uninstall guard on", "objects", fmt.Sprint(refs), "grant", sa != "")
	return sa
}

// unguard takes the uninstall guard off (package guard), then
// revokes the broker's grant: last, since it may take the permissions that
// let the broker do the rest. What it guarded is asked again (Guarded)
// while the broker's RoleBinding still grants it the listing, the replica
// that guarded may be another one, and each is then freed by name. The
// revoke is refused when the ServiceAccount went with the guard; then the
// namespace is being deleted, and the garbage collector removes the grant
// once it is gone.
func (u *uninstaller) unguard(ctx context.Context) error {
	refs, _, gerr := guard.Guarded(ctx, u.kube, u.opts.Namespace, u.leaderLease())
	freed, err := guard.Unprotect(ctx, u.dyn, u.opts.Namespace, refs)
	u.log.Info("uninstall: guard taken off", "objects", fmt.Sprint(freed))
	if err = errors.Join(gerr, err); err != nil {
		return fmt.Errorf("uninstall: %w", err)
	}
	if err := guard.Revoke(ctx, u.kube, u.opts.Namespace); err != nil {
		u.log.Info("uninstall: the grant stays until the namespace is gone", "error", err)
	}
	return nil
}

// leaderLease is the leader Lease's name, "" without leader election.
func (u *uninstaller) leaderLease() string {
	if le := u.opts.LeaderElection.withDefaults(); le.Enabled {
		return le.LeaseName
	}
	return ""
}
