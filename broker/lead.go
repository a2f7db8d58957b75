package broker

import (
	"context"

	"golang.org/x/sync/errgroup"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// leading is the work of the replica that leads: watching, dispatching
// and writing. Followers only serve gRPC, to refuse Connect with
// Unavailable.
type leading struct {
	*parts
	stopServing, stopWarming context.CancelFunc
	// uninstalling closes once the broker's Deployment is being deleted.
	uninstalling chan struct{}
	uninstallErr error
}

// run leads until ctx ends (leadership lost, or the broker stopping). When
// the broker is being uninstalled, it releases every hold before it
// returns, still leading: no other replica takes over and adds holds back
// while they are being released.
func (l *leading) run(ctx context.Context) {
	u := l.uninstaller
	if u.underWay(ctx) {
		// The replica that led before began an uninstall: finish it, and
		// never dispatch (which would add holds back).
		l.log.Info("another replica began uninstalling the broker: finishing the uninstall and exiting")
		closeOnce(l.uninstalling)
		l.stopServing()
		l.uninstallErr = u.run(nil)
		return
	}
	w, wctx := errgroup.WithContext(ctx)
	w.Go(func() error { return l.dispatcher.Start(wctx) })
	w.Go(func() error { l.afterRestore(wctx); return nil })
	if l.adm != nil {
		w.Go(func() error { return l.adm.hooks.Start(wctx) })
		w.Go(func() error { l.adm.forwardCAChanges(wctx); return nil })
	}
	if l.opts.Deployment != "" {
		w.Go(func() error {
			if watchUninstall(wctx, l.kube, l.opts.Namespace, l.opts.Deployment, l.log) {
				u.mark()
				closeOnce(l.uninstalling)
				l.stopServing()
			}
			return nil
		})
	}
	l.setServing(healthpb.HealthCheckResponse_SERVING)
	l.metrics.Leading(true)
	_ = w.Wait()
	l.metrics.Leading(false)
	l.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	l.unlabelOwnPod()
	select {
	case <-l.uninstalling:
		l.uninstallErr = u.run(l.dispatcher.Known())
	default:
	}
}

// afterRestore waits for the dispatcher to restore the recorded handlers
// and sync their informers, then does what must follow a restore: the
// leader label that sends handlers here, the uninstall guard (its grant
// widened at every Hello let in and every recheck period), and the look
// at orphans (a handler released before the restore would come back with
// it).
func (l *leading) afterRestore(ctx context.Context) {
	l.awaitSynced(ctx, l.dispatcher.Synced)
	// The restore has subscribed what the follower kept warm.
	l.stopWarming()
	if le := l.opts.LeaderElection; le.Enabled && le.Pod != "" && ctx.Err() == nil {
		if err := labelOwnPod(ctx, l.kube, l.opts.Namespace, le.Pod, true, l.log); err != nil && ctx.Err() == nil {
			l.log.Error("cannot mark this Pod the leader: the Service sends no handler here", "error", err)
		}
	}
	if sa := l.uninstaller.guard(ctx); sa != "" {
		widened := make(chan struct{})
		go func() {
			defer close(widened)
			l.uninstaller.widen(ctx)
		}()
		defer func() { <-widened }()
	}
	l.orphans().run(ctx)
}
