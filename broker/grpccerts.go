package broker

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/kube"
)

// Defaults of GRPCCerts.
const (
	DefaultGRPCSecret  = "tether-broker-grpc-tls"
	DefaultGRPCService = "tether-broker"
	// DefaultGRPCReplicasService is the headless Service that resolves to
	// every ready replica, for handlers that keep a session to each
	// (CAPABILITY_EVERY_REPLICA).
	DefaultGRPCReplicasService = "tether-broker-replicas"
	DefaultCAConfigMap         = "tether-broker-ca"
)

// CAConfigMapKey is the key of the CA bundle in the ConfigMap the broker
// publishes it in, as in kube-root-ca.crt.
const CAConfigMapKey = "ca.crt"

// GRPCCerts configure the gRPC serving certificate when Options.TLS is nil
// and the broker is not insecure. The zero value generates one: a CA and a
// certificate for the Service's names and Hosts, kept in SecretName and
// renewed there, as the admission certificate is. Given files (CertFile,
// KeyFile, as cert-manager writes them) win, and are read again when they
// change. Either way the CA bundle that verifies the certificate (the
// generated CA, or CAFile) is published in the ConfigMap CAConfigMap of
// the broker's namespace, under CAConfigMapKey, for handlers to mount, and
// in every namespace that asks for it (CANamespaceLabel; caPublisher).
type GRPCCerts struct {
	CertFile, KeyFile, CAFile string
	// SecretName keeps a generated certificate (default DefaultGRPCSecret),
	// and SecretName + certs.CASecretSuffix its CA.
	SecretName string
	// Service is the Service in the broker's namespace that handlers reach
	// it through (default DefaultGRPCService): the generated certificate
	// is valid for its names.
	Service string
	// ReplicasService is the headless Service in the broker's namespace
	// that resolves to every ready replica (default
	// DefaultGRPCReplicasService); "-" is none. The generated certificate is
	// valid for its names too: a handler on every replica dials each
	// replica's address and verifies this name.
	ReplicasService string
	// Hosts are more names or IP addresses the generated certificate is
	// valid for (default localhost and 127.0.0.1, for `kubectl
	// port-forward`).
	Hosts []string
	// CAConfigMap is where the CA bundle is published (default
	// DefaultCAConfigMap); "-" publishes none.
	CAConfigMap string
}

func (g GRPCCerts) withDefaults() GRPCCerts {
	if g.SecretName == "" {
		g.SecretName = DefaultGRPCSecret
	}
	if g.Service == "" {
		g.Service = DefaultGRPCService
	}
	if g.ReplicasService == "" {
		g.ReplicasService = DefaultGRPCReplicasService
	}
	if g.Hosts == nil {
		g.Hosts = []string{"localhost", "127.0.0.1"}
	}
	if g.CAConfigMap == "" {
		g.CAConfigMap = DefaultCAConfigMap
	}
	return g
}

// serving builds the gRPC serving certificate, its Secret in namespace.
func (g GRPCCerts) serving(kube kube.Interface, namespace string, overlap time.Duration, log hclog.Logger) (*certs.Serving, error) {
	g = g.withDefaults()
	names := serviceNames(g.Service, namespace)
	if g.ReplicasService != "-" {
		names = append(names, serviceNames(g.ReplicasService, namespace)...)
	}
	opts := certs.Options{
		Name: "grpc", Client: kube, Namespace: namespace, SecretName: g.SecretName, DNSNames: names,
		CertFile: g.CertFile, KeyFile: g.KeyFile, CAFile: g.CAFile, Log: log.Named("grpc-certs"), CAOverlap: overlap,
	}
	for _, h := range g.Hosts {
		if ip := net.ParseIP(h); ip != nil {
			opts.IPAddresses = append(opts.IPAddresses, ip)
		} else {
			opts.DNSNames = append(opts.DNSNames, h)
		}
	}
	return certs.New(opts)
}

// grpcTLS is the TLS configuration of a gRPC server serving s.
func grpcTLS(s *certs.Serving) *tls.Config {
	return &tls.Config{GetCertificate: s.GetCertificate, MinVersion: tls.VersionTLS12}
}
