package broker

import (
	"crypto/tls"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
)

// maxStreamsPerConnection bounds the gRPC streams of one connection.
const maxStreamsPerConnection = 16

// serverOptions are the gRPC server's limits, keepalives and, unless
// insecure, its TLS.
func (b *Broker) serverOptions(tlsConfig *tls.Config) []grpc.ServerOption {
	opts := []grpc.ServerOption{
		grpc.MaxRecvMsgSize(b.opts.MaxMessageSize),
		// A handler instance needs one stream (and health checks); a
		// client opening thousands on one connection is not one.
		grpc.MaxConcurrentStreams(maxStreamsPerConnection),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}),
	}
	if tlsConfig != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	return opts
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
