package broker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker/kube"
)

// run starts the parts and waits for them. Every replica runs the
// informers, the gRPC server and the certificates; the one that leads (all
// of them without leader election) also runs lead. When ctx ends, the
// servers stop gracefully; when the broker is being uninstalled, the
// leader releases every hold before run returns.
func (p *parts) run(ctx context.Context) error {
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	// A follower keeps the caches of the recorded handlers warm until, as
	// the leader, its restore has subscribed them.
	warmCtx, stopWarming := context.WithCancel(serveCtx)
	defer stopWarming()
	l := &leading{parts: p, stopServing: stopServing, stopWarming: stopWarming, uninstalling: make(chan struct{})}
	p.setServing(healthpb.HealthCheckResponse_NOT_SERVING)
	g, gctx := errgroup.WithContext(serveCtx)
	// The informers outlive a follower's wait, so that what it kept warm
	// is there when it leads.
	g.Go(func() error { return p.informers.Start(gctx) })
	if le := p.opts.LeaderElection; le.Enabled {
		if !le.ColdStandby {
			g.Go(func() error { return p.dispatcher.KeepWarm(warmCtx) })
		}
		elect, err := p.elect(l.run)
		if err != nil {
			return err
		}
		g.Go(func() error { return elect(gctx) })
	} else {
		g.Go(func() error { l.run(gctx); return nil })
	}
	g.Go(p.serve)
	if p.grpcCerts != nil {
		g.Go(func() error { return p.grpcCerts.Start(gctx) })
		if cm := p.opts.GRPCCerts.withDefaults().CAConfigMap; cm != "-" {
			g.Go(func() error { return newCAPublisher(p.kube, p.opts.Namespace, cm, p.grpcCerts, p.log).Start(gctx) })
		}
	}
	if p.adm != nil {
		g.Go(func() error { return p.adm.certs.Start(gctx) })
		g.Go(func() error { return p.adm.server.Start(gctx) })
		if gate := p.gateReviewers(); gate != nil {
			g.Go(func() error { gate.readWanted(gctx, p.adm.hooks.EveryReplica); return nil })
		}
	}
	g.Go(func() error {
		<-gctx.Done()
		p.health.stopping.Store(true)
		p.healthSrv.Shutdown()
		p.sessions.Shutdown()
		stopGracefully(p.srv, 5*time.Second)
		return nil
	})
	return errors.Join(g.Wait(), l.uninstallErr)
}

// elect returns the leader election loop, which runs lead while this
// replica leads.
func (p *parts) elect(lead func(context.Context)) (func(context.Context) error, error) {
	p.health.elected.Store(true)
	// A container restarted in a Pod that led must not be sent handlers
	// before it leads again.
	p.unlabelOwnPod()
	// Renewals have a client of their own, as kube-controller-manager's
	// do: a busy dispatcher must not make the leader miss its deadline.
	lcfg := rest.CopyConfig(p.cfg)
	lcfg.QPS, lcfg.Burst, lcfg.RateLimiter = -1, 0, nil
	lkube, err := kube.NewForConfig(lcfg)
	if err != nil {
		return nil, fmt.Errorf("creating client for leader election: %w", err)
	}
	le := p.opts.LeaderElection
	alive, err := p.listenLiveness()
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		el := election{kube: lkube, namespace: p.opts.Namespace, identity: p.opts.Identity, livenessAddress: alive,
			cfg: le, tenure: p.tenure, log: p.log}
		return el.run(ctx, lead)
	}, nil
}

// listenLiveness opens the liveness listener and returns its address, or
// "" when this replica has none (LeaderElection.LivenessAddress). It is
// closed by p.stop, once the broker stopped writing.
func (p *parts) listenLiveness() (string, error) {
	addr := livenessAddress(p.opts.LeaderElection.LivenessAddress, p.lis.Addr())
	if addr == "" || addr == "-" {
		p.log.Info("no liveness address: if this replica dies while leading, followers wait for the Lease to expire")
		return "", nil
	}
	lis, err := livenessListener(addr)
	if err != nil {
		return "", err
	}
	p.stops = append(p.stops, func() { lis.Close() })
	return lis.Addr().String(), nil
}

// serve serves gRPC on the broker's listener until the server is stopped.
func (p *parts) serve() error {
	p.log.Info("broker serving", "address", p.lis.Addr().String(), "insecure", p.opts.Insecure,
		"leader_election", p.opts.LeaderElection.Enabled)
	p.health.serving.Store(true)
	if err := p.srv.Serve(p.opts.GRPCLimits.limitConnections(p.lis)); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serving gRPC: %w", err)
	}
	return nil
}
