package broker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/tether-dev/tether/broker/auth"
)

// readiness is what /readyz reports.
type readiness struct {
	serving  atomic.Bool // the gRPC server accepts streams
	synced   atomic.Bool // the dispatcher synced once; it stays so
	stopping atomic.Bool // shutdown began
	// elected: replicas elect a leader, and the Service finds it by
	// LeaderLabel, not by readiness: a replica that serves is ready, to
	// lead or to take over.
	elected atomic.Bool
	// reviewers, when set, keeps a replica that starts out of service
	// until the handlers that answer reviews on every replica are here.
	reviewers atomic.Pointer[reviewersGate]
}

// notReady says why the broker is not ready; "" when it is.
func (h *readiness) notReady() string {
	switch {
	case h.stopping.Load():
		return "shutting down"
	case !h.serving.Load():
		return "the gRPC server is not serving yet"
	case !h.synced.Load() && !h.elected.Load():
		return "the handlers' informers have not synced yet"
	}
	return h.reviewers.Load().notReady()
}

// ErrMetricsListen marks a failure to bind MetricsListen.
var ErrMetricsListen = errors.New("cannot listen for metrics")

// MetricsAddr is the address of the metrics and health endpoints, once
// Listen has bound it; nil when they are off.
func (b *Broker) MetricsAddr() net.Addr {
	if b.mlis == nil {
		return nil
	}
	return b.mlis.Addr()
}

// listenMetrics binds MetricsListen, when set.
func (b *Broker) listenMetrics() error {
	if b.mlis != nil {
		return nil
	}
	if b.opts.MetricsListener != nil {
		b.mlis = b.opts.MetricsListener
		return nil
	}
	if b.opts.MetricsListen == "" {
		return nil
	}
	lis, err := net.Listen("tcp", b.opts.MetricsListen)
	if err != nil {
		return fmt.Errorf("%w on %s: %w", ErrMetricsListen, b.opts.MetricsListen, err)
	}
	b.mlis = lis
	return nil
}

// serveMetrics serves /metrics, /healthz and /readyz on the metrics
// listener until the returned stop is called; stop waits for open requests
// a little, then closes them. /metrics is behind authz unless it is nil
// (insecure) or MetricsOpen.
func (b *Broker) serveMetrics(authz *auth.Authenticator) (stop func()) {
	if b.mlis == nil {
		return func() {}
	}
	mux := http.NewServeMux()
	metrics := b.metrics.Handler()
	if authz != nil && !b.opts.MetricsOpen {
		metrics = authz.Protect(metrics)
	}
	mux.Handle("GET /metrics", metrics)
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if why := b.health.notReady(); why != "" {
			http.Error(w, why, http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.log.Info("serving metrics and health", "address", b.mlis.Addr().String())
		if err := srv.Serve(b.mlis); err != nil && !errors.Is(err, http.ErrServerClosed) {
			b.log.Error("metrics and health endpoints stopped", "error", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			_ = srv.Close()
		}
		<-done
	}
}

// awaitSynced marks the broker synced once synced reports true; it gives
// up when ctx ends.
func (b *Broker) awaitSynced(ctx context.Context, synced func() bool) {
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(context.Context) (bool, error) {
		return synced(), nil
	})
	if err == nil {
		b.health.synced.Store(true)
		b.log.Info("broker ready: handlers restored and informers synced")
	}
}
