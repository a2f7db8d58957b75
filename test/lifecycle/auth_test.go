package lifecycle

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// selfSigned makes a serving certificate for 127.0.0.1 and a pool that
// trusts it.
func selfSigned(t *testing.T) (*tls.Config, *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tether-broker"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, pool
}

// anyHandlerName lets a ServiceAccount connect under every handler name in
// the broker's namespace.
var anyHandlerName = rbacv1.PolicyRule{APIGroups: []string{"tether.dev"}, Resources: []string{"handlers"}, Verbs: []string{"connect"}}

// widgetHandlerToken grants the ServiceAccount sa of ns what a handler of
// widgets in ns needs (any handler name) and returns a token of it.
func widgetHandlerToken(t *testing.T, cp *controlplane.ControlPlane, ns, sa string) string {
	t.Helper()
	ctx := context.Background()
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{"test.tether.dev"}, Resources: []string{"widgets"},
			Verbs: []string{"get", "list", "watch", "patch"}}, anyHandlerName},
	}
	if _, err := cp.Client().RbacV1().Roles(ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "widgets", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "widgets"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}},
	}
	if _, err := cp.Client().RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	token, err := cp.ServiceAccountToken(ctx, ns, sa)
	if err != nil {
		t.Fatal(err)
	}
	return token
}

// TestTokenAndPermissionsAreChecked: over TLS, a handler authenticates with
// a ServiceAccount token (TokenReview) and may bind only what its own RBAC
// lets it list, watch and patch (SubjectAccessReview): the broker's broad
// RBAC is no way around it.
func TestTokenAndPermissionsAreChecked(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	serverTLS, pool := selfSigned(t)
	addr := startBroker(t, cp, func(o *broker.Options) { o.Insecure, o.TLS, o.Namespace = false, serverTLS, ns })
	ctx := context.Background()
	allowed := widgetHandlerToken(t, cp, ns, "allowed")
	denied, err := cp.ServiceAccountToken(ctx, ns, "denied")
	if err != nil {
		t.Fatal(err)
	}
	clientTLS := &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	newHandler := func(name, token string, opts ...sdk.BindingOption) (*sdk.Handler, *journal) {
		var j journal
		h := sdk.New(name, sdk.WithTLS(clientTLS), sdk.WithToken(token),
			sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
		h.OnCreate(widgets, j.record(nil), opts...)
		return h, &j
	}
	rejected := func(h *sdk.Handler) *sdk.RejectedError {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		var rej *sdk.RejectedError
		if err := h.Run(ctx, addr); !errors.As(err, &rej) {
			t.Fatalf("handler %s: Run = %v, want a rejection", h.Name(), err)
		}
		return rej
	}

	good, j := newHandler("authorized", allowed, sdk.Namespaces(ns))
	runHandler(t, good, addr)
	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Create, "w", 1)

	cases := []struct {
		name, token string
		opts        []sdk.BindingOption
		code        string
		says        []string
	}{
		{"no-rbac", denied, []sdk.BindingOption{sdk.Namespaces(ns)}, "PermissionDenied", []string{"handler", "may not connect handlers.tether.dev no-rbac", ns}},
		{"too-wide", allowed, nil, "PermissionDenied", []string{"bindings[0]", "cluster-wide"}},
		{"bad-token", "not-a-token", []sdk.BindingOption{sdk.Namespaces(ns)}, "Unauthenticated", []string{"invalid token"}},
	}
	for _, c := range cases {
		h, _ := newHandler(c.name, c.token, c.opts...)
		rej := rejected(h)
		if rej.Code != c.code {
			t.Errorf("%s: code %s (%s), want %s", c.name, rej.Code, rej.Message, c.code)
		}
		for _, s := range c.says {
			if !strings.Contains(rej.Message, s) {
				t.Errorf("%s: message %q does not say %q", c.name, rej.Message, s)
			}
		}
	}
}
