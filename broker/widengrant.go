package broker

import (
	"context"
	"time"

	"github.com/tether-dev/tether/broker/guard"
	"github.com/tether-dev/tether/broker/session"
)

// widen adds to the broker's uninstall grant, every RecheckEvery
// while it leads, the rules bound to its ServiceAccount sa since: a
// handler's ClusterRole aggregated into tether-broker after the start
// (guard.Widen). The grant never shrinks while it leads, so that an
// uninstall deleting the aggregated ClusterRole first leaves the broker
// what it needs to release.
func (u *uninstaller) widen(ctx context.Context, sa string) {
	every := u.opts.RecheckEvery
	if every <= 0 {
		every = session.DefaultRecheckEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := guard.Widen(ctx, u.kube, u.opts.Namespace, sa); err != nil && ctx.Err() == nil {
			u.log.Warn("cannot add the handlers' grants to the uninstall grant", "error", err)
		}
	}
}
