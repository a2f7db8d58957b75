package broker

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/broker/certs"
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
// the broker's namespace, under CAConfigMapKey, for handlers to mount.
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
func (g GRPCCerts) serving(kube kubernetes.Interface, namespace string, overlap time.Duration, log hclog.Logger) (*certs.Serving, error) {
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

// caPublishRetry is the wait before writing the CA bundle's ConfigMap
// again after a failed write.
const caPublishRetry = 10 * time.Second

// publishCA keeps the ConfigMap name in ns holding s's CA bundle until ctx
// ends: at once, on every change of the bundle, and again after a failed
// write. Every replica writes it; they write the same bundle.
func publishCA(ctx context.Context, kube kubernetes.Interface, ns, name string, s *certs.Serving, log hclog.Logger) {
	retry := time.NewTimer(0)
	defer retry.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.Changed():
		case <-retry.C:
		}
		if err := writeCA(ctx, kube, ns, name, s.CABundle()); err != nil && ctx.Err() == nil {
			log.Warn("cannot publish the gRPC CA bundle; retrying", "configmap", ns+"/"+name, "error", err, "delay", caPublishRetry)
			retry.Reset(caPublishRetry)
		}
	}
}

// writeCA makes the ConfigMap hold bundle, creating it when needed; a
// replica that wrote it meanwhile is read again.
func writeCA(ctx context.Context, kube kubernetes.Interface, ns, name string, bundle []byte) error {
	if len(bundle) == 0 {
		return nil // a given certificate without a CA file: clients use their system roots
	}
	cms := kube.CoreV1().ConfigMaps(ns)
	ref := ns + "/" + name
	for range certs.MaxSecretAttempts {
		cm, err := cms.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = cms.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{
					"app.kubernetes.io/name": "tether-broker", "app.kubernetes.io/component": "grpc",
				}},
				Data: map[string]string{CAConfigMapKey: string(bundle)},
			}, metav1.CreateOptions{})
		case err != nil:
			return fmt.Errorf("reading ConfigMap %s: %w", ref, err)
		case cm.Data[CAConfigMapKey] == string(bundle):
			return nil
		default:
			cm = cm.DeepCopy()
			if cm.Data == nil {
				cm.Data = map[string]string{}
			}
			cm.Data[CAConfigMapKey] = string(bundle)
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue // another replica wrote it meanwhile: look again
		}
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			return nil // an uninstall: no handler is to connect any more
		}
		if err != nil {
			return fmt.Errorf("publishing the CA bundle in ConfigMap %s: %w", ref, err)
		}
		return nil
	}
	return fmt.Errorf("ConfigMap %s changed %d times while the CA bundle was being written", ref, certs.MaxSecretAttempts)
}
