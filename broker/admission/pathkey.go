package admission

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/kube"
)

// PathKey signs the admission paths the broker writes into its webhook
// configurations. The endpoint answers only a path whose signature is
// right: only the API server, and those who may read webhook
// configurations, know it. That works on every cluster, without
// API-server flags for client certificates, and costs nothing per review
// but an HMAC, checked before anything else (before the body is read).
type PathKey struct{ key []byte }

// PathKeySize is the length of a path key, in bytes.
const PathKeySize = 32

// SecretPathKey is the key of the path key in its Secret.
const SecretPathKey = "path.key"

// NewPathKey returns a PathKey of key, which must be PathKeySize bytes.
func NewPathKey(key []byte) (*PathKey, error) {
	if len(key) != PathKeySize {
		return nil, fmt.Errorf("a path key is %d bytes, not %d", PathKeySize, len(key))
	}
	return &PathKey{key: key}, nil
}

// Path is the endpoint of a handler's binding:
// /admit/<handler>/<binding-id>/<signature>.
func (k *PathKey) Path(handler, bindingID string) string {
	return PathPrefix + url.PathEscape(handler) + "/" + url.PathEscape(bindingID) + "/" + k.sign(handler, bindingID)
}

// sign is the path's signature in lowercase hex: the API server takes a
// Service path only when each segment is a lowercase RFC 1123 subdomain
// (handler names and binding ids are DNS labels already).
func (k *PathKey) sign(handler, bindingID string) string {
	mac := hmac.New(sha256.New, k.key)
	mac.Write([]byte(handler + "/" + bindingID))
	return hex.EncodeToString(mac.Sum(nil))
}

// parse splits a signed path; ok is false for any path Path did not make.
func (k *PathKey) parse(p string) (handler, bindingID string, ok bool) {
	rest, ok := strings.CutPrefix(p, PathPrefix)
	if !ok {
		return "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return "", "", false
	}
	want := k.sign(parts[0], parts[1])
	if !hmac.Equal([]byte(parts[2]), []byte(want)) {
		return "", "", false
	}
	return parts[0], parts[1], true
}

// LoadPathKey reads the path key from the Secret namespace/name, creating
// it when it does not exist. Replicas and restarts share it; whoever loses
// the race to create it takes the winner's.
func LoadPathKey(ctx context.Context, client kube.Interface, namespace, name string) (*PathKey, error) {
	secrets := client.CoreV1().Secrets(namespace)
	ref := namespace + "/" + name
	for range certs.MaxSecretAttempts {
		sec, err := secrets.Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			k, err := NewPathKey(sec.Data[SecretPathKey])
			if err != nil {
				return nil, fmt.Errorf("the admission path key in Secret %s: %w; delete the Secret to have a new one made", ref, err)
			}
			return k, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the admission path key Secret %s: %w", ref, err)
		}
		key := make([]byte, PathKeySize)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("making an admission path key: %w", err)
		}
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{
				"app.kubernetes.io/name": "tether-broker", "app.kubernetes.io/component": "admission",
			}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{SecretPathKey: key},
		}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue // another replica made it first: take theirs
		}
		if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
			// An uninstall by namespace deletion: the broker must still
			// start, to release its holds; the webhooks are going anyway.
			return NewPathKey(key)
		}
		if err != nil {
			return nil, fmt.Errorf("creating the admission path key Secret %s: %w", ref, err)
		}
		return NewPathKey(key)
	}
	return nil, errors.New("the admission path key Secret " + ref + " keeps changing; giving up")
}
