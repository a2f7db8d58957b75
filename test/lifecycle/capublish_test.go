package lifecycle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestBrokerPublishesItsCAWhereAsked: a handler in another namespace than
// the broker's mounts the CA bundle from a ConfigMap of its own namespace.
// The broker, with only the rights deploy/broker gives it, publishes the
// bundle into every namespace labelled tether.dev/broker-ca=<its
// namespace> whose install grants it get and update on that one ConfigMap
// (here the install ships it empty, as deploy/example-handler does), and
// follows a CA rotation there (old and new CA side by side). A labelled
// namespace that grants nothing gets nothing, and the broker goes on
// serving.
func TestBrokerPublishesItsCAWhereAsked(t *testing.T) {
	cp := controlplane.Get(t)
	ns := cp.Namespace(t)
	cfg := caPublisherIdentity(t, cp, ns)
	granted, refused := cp.Namespace(t), cp.Namespace(t)
	for _, other := range []string{granted, refused} {
		labelNamespace(t, cp, other, broker.CANamespaceLabel, ns)
	}
	s := &secure{cp: cp, ns: ns}
	s.grantIn(t, granted, "broker-ca", "broker", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"},
		ResourceNames: []string{broker.DefaultCAConfigMap}, Verbs: []string{"get", "update"}})
	empty := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: broker.DefaultCAConfigMap, Namespace: granted}}
	if _, err := cp.Client().CoreV1().ConfigMaps(granted).Create(t.Context(), empty, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secure := func(o *broker.Options) {
		o.Insecure, o.TLS, o.Namespace, o.Config, o.CAOverlap = false, nil, ns, cfg, time.Hour
	}
	_, stop := startStoppableBroker(t, cp, secure)
	own := publishedCAs(t, cp, ns, 1)
	if got := publishedCAs(t, cp, granted, 1); !got[0].Equal(own[0]) {
		t.Errorf("the CA published in %s is not the broker's", granted)
	}

	// A rotation: the CA Secret is lost while no broker runs; the next
	// publishes the new CA beside the old one, everywhere it publishes.
	stop()
	if err := cp.Client().CoreV1().Secrets(ns).Delete(t.Context(), broker.DefaultGRPCSecret+certs.CASecretSuffix, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	addr := startBroker(t, cp, secure)
	own = publishedCAs(t, cp, ns, 2)
	got := publishedCAs(t, cp, granted, 2)
	for i := range own {
		if !got[i].Equal(own[i]) {
			t.Errorf("CA %d published in %s is not the broker's", i, granted)
		}
	}

	if _, err := cp.Client().CoreV1().ConfigMaps(refused).Get(t.Context(), broker.DefaultCAConfigMap, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("ConfigMap %s/%s: %v, want none: the namespace granted nothing", refused, broker.DefaultCAConfigMap, err)
	}
	pool := x509.NewCertPool()
	for _, c := range own {
		pool.AddCert(c)
	}
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatalf("the broker no longer serves after a namespace refused it: %v", err)
	}
	conn.Close()
}

// caPublisherIdentity is brokerIdentity with what deploy/broker gives the
// broker for its CA bundle: get, create and update on ConfigMaps of its
// namespace, and list and watch on namespaces, to find those that ask.
func caPublisherIdentity(t *testing.T, cp *controlplane.ControlPlane, ns string) *rest.Config {
	t.Helper()
	cfg := brokerIdentity(t, cp, ns, "broker")
	s := &secure{cp: cp, ns: ns}
	s.grant(t, "broker-ca", "broker", rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"configmaps"},
		Verbs: []string{"get", "create", "update"}})
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "broker-namespaces-" + ns}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}},
	}}
	rbac := cp.Client().RbacV1()
	if _, err := rbac.ClusterRoles().Create(t.Context(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = rbac.ClusterRoles().Delete(context.Background(), role.Name, metav1.DeleteOptions{}) })
	bindClusterRole(t, cp, role.Name, ns, "broker")
	return cfg
}

// labelNamespace sets the label key=value on the namespace ns.
func labelNamespace(t *testing.T, cp *controlplane.ControlPlane, ns, key, value string) {
	t.Helper()
	n, err := cp.Client().CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if n.Labels == nil {
		n.Labels = map[string]string{}
	}
	n.Labels[key] = value
	if _, err := cp.Client().CoreV1().Namespaces().Update(t.Context(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// publishedCAs waits until the CA bundle published in ns holds n CAs and
// returns them.
func publishedCAs(t *testing.T, cp *controlplane.ControlPlane, ns string, n int) []*x509.Certificate {
	t.Helper()
	var cas []*x509.Certificate
	eventually(t, "the CA bundle published in "+ns+" holds the CAs", func() bool {
		cm, err := cp.Client().CoreV1().ConfigMaps(ns).Get(t.Context(), broker.DefaultCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return false
		}
		cas = nil
		for rest := []byte(cm.Data[broker.CAConfigMapKey]); ; {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
			if c, err := x509.ParseCertificate(b.Bytes); err == nil {
				cas = append(cas, c)
			}
		}
		return len(cas) == n
	})
	return cas
}
