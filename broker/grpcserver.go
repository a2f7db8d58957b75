package broker

import (
	"crypto/tls"
	"net"
	"time"

	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// maxStreamsPerConnection bounds the gRPC streams of one connection.
const maxStreamsPerConnection = 16

// The defaults of GRPCLimits.
const (
	DefaultMaxConnections        = 1024
	DefaultMaxConnectionIdle     = 5 * time.Minute
	DefaultMaxConnectionAge      = 30 * time.Minute
	DefaultMaxConnectionAgeGrace = 2 * time.Minute
)

// GRPCLimits bound the gRPC connections: how many, how long one may go
// without a stream, and how long one may live. Zero values are the
// defaults.
type GRPCLimits struct {
	// MaxConnections bounds the connections open at once; further ones
	// wait in the listen backlog until one closes.
	MaxConnections int
	// MaxConnectionIdle closes a connection that had no stream for this
	// long (a handler's connection always has its Connect stream).
	MaxConnectionIdle time.Duration
	// MaxConnectionAge sends GOAWAY to a connection this old (gRPC adds up
	// to 10% either way, so that connections opened together do not end
	// together); its streams then have MaxConnectionAgeGrace to end before
	// the connection is closed. The SDKs reconnect when their stream ends.
	MaxConnectionAge, MaxConnectionAgeGrace time.Duration
}

func (l GRPCLimits) withDefaults() GRPCLimits {
	if l.MaxConnections <= 0 {
		l.MaxConnections = DefaultMaxConnections
	}
	if l.MaxConnectionIdle <= 0 {
		l.MaxConnectionIdle = DefaultMaxConnectionIdle
	}
	if l.MaxConnectionAge <= 0 {
		l.MaxConnectionAge = DefaultMaxConnectionAge
	}
	if l.MaxConnectionAgeGrace <= 0 {
		l.MaxConnectionAgeGrace = DefaultMaxConnectionAgeGrace
	}
	return l
}

// MinPingInterval is the shortest interval between a client's keepalive
// pings the broker permits (docs/protocol.md, [conn.keepalive]).
const MinPingInterval = 10 * time.Second

// KeepaliveEnforcement holds clients to MinPingInterval, with or without a
// stream: past three pings in a row that come sooner, with nothing sent to
// the client between them, gRPC answers GOAWAY (too_many_pings) and closes
// the connection.
func KeepaliveEnforcement() keepalive.EnforcementPolicy {
	return keepalive.EnforcementPolicy{MinTime: MinPingInterval, PermitWithoutStream: true}
}

// serverOptions are the gRPC server's limits, keepalives and, unless
// insecure, its TLS.
func (l GRPCLimits) serverOptions(maxMessageSize int, tlsConfig *tls.Config) []grpc.ServerOption {
	l = l.withDefaults()
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessageSize),
		// A handler instance needs one stream (and health checks); a
		// client opening thousands on one connection is not one.
		grpc.MaxConcurrentStreams(maxStreamsPerConnection),
		// The SDKs ping every 30 s; a client pinging more often than every
		// MinPingInterval is told GOAWAY (too_many_pings) and its
		// connection closed.
		grpc.KeepaliveEnforcementPolicy(KeepaliveEnforcement()),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			Time: 30 * time.Second, Timeout: 10 * time.Second,
			MaxConnectionIdle: l.MaxConnectionIdle, MaxConnectionAge: l.MaxConnectionAge, MaxConnectionAgeGrace: l.MaxConnectionAgeGrace,
		}),
	}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	return opts
}

// limitConnections bounds the connections lis accepts at once: past the
// bound, Accept waits until one closes.
func (l GRPCLimits) limitConnections(lis net.Listener) net.Listener {
	return netutil.LimitListener(lis, l.withDefaults().MaxConnections)
}

// stopGracefully lets open streams end by themselves for a while; handler
// streams are long-lived, so it then cuts them.
func stopGracefully(srv *grpc.Server, d time.Duration) {
	done := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(done)
	}()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		srv.Stop()
		<-done
	}
}
