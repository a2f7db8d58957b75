package relay

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// fakeSecrets are Secrets by name; a missing one is NotFound.
type fakeSecrets map[string]*corev1.Secret

func (f fakeSecrets) Get(_ context.Context, name string, _ metav1.GetOptions) (*corev1.Secret, error) {
	if s, ok := f[name]; ok {
		return s, nil
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "secrets"}, name)
}

func TestSecretSourceReadsTheServingSecret(t *testing.T) {
	full := map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k"), "ca.crt": []byte("a")}
	secrets := fakeSecrets{
		"full":    {Data: full},
		"no-ca":   {Data: map[string][]byte{"tls.crt": []byte("c"), "tls.key": []byte("k")}},
		"no-cert": {Data: map[string][]byte{"ca.crt": []byte("a")}},
	}
	for _, tc := range []struct {
		name   string
		want   CertPEM
		noCert bool
	}{
		{"full", CertPEM{Cert: []byte("c"), Key: []byte("k"), CA: []byte("a")}, false},
		{"no-ca", CertPEM{}, true},
		{"no-cert", CertPEM{}, true},
		{"missing", CertPEM{}, true},
	} {
		got, err := SecretSource{Secrets: secrets, Name: tc.name}.Load(context.Background())
		if errors.Is(err, ErrNoCert) != tc.noCert || string(got.Cert)+string(got.Key)+string(got.CA) != string(tc.want.Cert)+string(tc.want.Key)+string(tc.want.CA) {
			t.Errorf("%s: %+v, %v; want %+v, no certificate %v", tc.name, got, err, tc.want, tc.noCert)
		}
	}
}
