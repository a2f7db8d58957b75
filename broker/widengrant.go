package broker

import (
	"context"
	"time"

	"github.com/tether-dev/tether/broker/guard"
)

// widen adds to the broker's uninstall grant, every RecheckEvery while it
// leads, the rules bound to its ServiceAccount since (widenNow).
func (u *uninstaller) widen(ctx context.Context) {
	t := time.NewTicker(u.opts.RecheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		u.widenNow(ctx)
	}
}

// widenNow adds to the uninstall grant the rules bound to the broker since
// it was made: a handler's ClusterRole aggregated into tether-broker after
// the start (guard.Widen). It is called at every Hello the broker lets in,
// before anything is held for that handler (session.Options.Admitted), so
// that an uninstall that deletes the aggregated ClusterRole at once
// (`kubectl delete -k`) leaves the broker what it needs to release those
// holds. The grant never shrinks while the broker leads. Before the guard
// is on (u.sa is "") it does nothing: Grant, when it comes, copies what is
// bound then; u.mu keeps a Hello from falling between the two.
func (u *uninstaller) widenNow(ctx context.Context) {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.sa == "" {
		return
	}
	if err := guard.Widen(ctx, u.kube, u.opts.Namespace, u.sa); err != nil && ctx.Err() == nil {
		u.log.Warn("cannot add the handlers' grants to the uninstall grant", "error", err)
	}
}
