package controlplane

import (
	"context"
	"fmt"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RESTConfig returns a copy of the admin REST config (bearer token of a
// system:masters user, QPS 200, burst 400). Callers may change the copy.
func (cp *ControlPlane) RESTConfig() *rest.Config { return rest.CopyConfig(cp.rest) }

// Client returns an admin clientset built from RESTConfig.
func (cp *ControlPlane) Client() kubernetes.Interface { return cp.client }

// KubeconfigPath returns the path of the admin kubeconfig in Dir.
func (cp *ControlPlane) KubeconfigPath() string { return cp.kubeconfig }

// URL returns the API server's address, https://127.0.0.1:PORT (or the
// given Options.Address).
func (cp *ControlPlane) URL() string { return cp.url }

// AdminToken returns the bearer token of the admin user (group system:masters).
func (cp *ControlPlane) AdminToken() string { return cp.token }

// Binaries returns the binaries the control plane was started with. Kubectl
// is set when they came from [Ensure] (as with [RunTests]).
func (cp *ControlPlane) Binaries() Binaries { return cp.bins }

// Dir returns the folder holding the control plane's data, keys and logs.
func (cp *ControlPlane) Dir() string { return cp.dir }

// StartDuration returns how long Start took from launching etcd until the API
// server was ready (building or finding the binaries not included).
func (cp *ControlPlane) StartDuration() time.Duration { return cp.startTook }

// ServiceAccountToken creates the ServiceAccount namespace/name if it does not
// exist and returns a one-hour token for it from the TokenRequest API. The
// namespace must exist. The token is meant for audiences, or when none are
// given for the API server's default audience.
func (cp *ControlPlane) ServiceAccountToken(ctx context.Context, namespace, name string, audiences ...string) (string, error) {
	sas := cp.client.CoreV1().ServiceAccounts(namespace)
	_, err := sas.Create(ctx, &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return "", fmt.Errorf("creating service account %s/%s: %w", namespace, name, err)
	}
	expiry := int64(3600)
	tr, err := sas.CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token for service account %s/%s: %w", namespace, name, err)
	}
	return tr.Status.Token, nil
}
