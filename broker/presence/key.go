package presence

import (
	"context"
	"crypto/rand"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker/kube"
)

// KeySecret is the Secret, in the broker's namespace, that keeps the key
// the broker signs presence Leases with (sign.go); KeySecretKey is its key
// in the Secret's data.
const (
	KeySecret    = "tether-broker-presence-key"
	KeySecretKey = "key"
)

// keySize is the length of a generated key: SHA-256's block of security.
const keySize = 32

// maxKeyAttempts bounds the rounds of creating the Secret when other
// replicas create it at the same time.
const maxKeyAttempts = 5

// Key is the broker's presence key.
type Key struct {
	Secret []byte
	// Created is when the key was made (its Secret's creation): unsigned
	// records are taken for an upgrade's only for UnsignedAcceptedFor.
	Created time.Time
}

// LoadKey reads the key from its Secret in namespace, creating the Secret
// with a new random key when it is missing. Every replica and restart
// shares it: whoever loses the race to create it reads the winner's. A
// Secret whose key is not keySize bytes is refused rather than replaced,
// which would make every signed Lease fail to verify.
func LoadKey(ctx context.Context, client kube.Interface, namespace string, log hclog.Logger) (*Key, error) {
	secrets := client.CoreV1().Secrets(namespace)
	ref := namespace + "/" + KeySecret
	for range maxKeyAttempts {
		sec, err := secrets.Get(ctx, KeySecret, metav1.GetOptions{})
		if err == nil {
			k := sec.Data[KeySecretKey]
			if len(k) != keySize {
				return nil, fmt.Errorf("the presence key Secret %s holds no %d-byte %q: delete it for the broker to make a new one "+
					"(the handlers' Leases then fail to verify until they sign in again)", ref, keySize, KeySecretKey)
			}
			return &Key{Secret: k, Created: sec.CreationTimestamp.Time}, nil
		}
		if !apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("reading the presence key Secret %s: %w", ref, err)
		}
		k := make([]byte, keySize)
		if _, err := rand.Read(k); err != nil {
			return nil, fmt.Errorf("generating the presence key: %w", err)
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: KeySecret, Namespace: namespace,
				Labels: map[string]string{"app.kubernetes.io/name": "tether-broker", "app.kubernetes.io/component": "presence"},
			},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{KeySecretKey: k},
		}
		created, err := secrets.Create(ctx, sec, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			continue // another replica created it first: take theirs
		case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
			// An uninstall by namespace deletion: the broker must still
			// run, to release its holds, and nothing can be kept.
			log.Warn("the namespace is being deleted: signing presence Leases with a key kept in memory only", "secret", ref)
			return &Key{Secret: k, Created: time.Now()}, nil
		case err != nil:
			return nil, fmt.Errorf("creating the presence key Secret %s: %w", ref, err)
		}
		log.Info("created the presence key", "secret", ref)
		return &Key{Secret: k, Created: created.CreationTimestamp.Time}, nil
	}
	return nil, fmt.Errorf("the presence key Secret %s changed %d times while it was being created; trying again later", ref, maxKeyAttempts)
}
