package lifecycle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestBrokerIssuesItsOwnGRPCCertificate: given no certificate, a secure
// broker generates a CA and a serving certificate for its Service's names
// and for 127.0.0.1, keeps them in a Secret and publishes the CA in the
// ConfigMap tether-broker-ca. A handler that trusts that bundle alone
// connects over TLS with its token; after a restart the broker serves a
// certificate of the same CA, so the handler still trusts it.
func TestBrokerIssuesItsOwnGRPCCertificate(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	secure := func(o *broker.Options) { o.Insecure, o.TLS, o.Namespace = false, nil, ns }
	addr := startBroker(t, cp, secure)
	ctx := context.Background()

	var bundle string
	eventually(t, "the CA bundle published", func() bool {
		cm, err := cp.Client().CoreV1().ConfigMaps(ns).Get(ctx, broker.DefaultCAConfigMap, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		bundle = cm.Data[broker.CAConfigMapKey]
		return bundle != ""
	})
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(bundle)) {
		t.Fatalf("no certificate in the published bundle %q", bundle)
	}
	if _, err := cp.Client().CoreV1().Secrets(ns).Get(ctx, broker.DefaultGRPCSecret, metav1.GetOptions{}); err != nil {
		t.Fatalf("the generated certificate's Secret: %v", err)
	}
	verifies := func(addr, serverName string) error {
		conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: pool, ServerName: serverName, MinVersion: tls.VersionTLS12, NextProtos: []string{"h2"}})
		if err == nil {
			conn.Close()
		}
		return err
	}
	for _, name := range []string{"", "tether-broker." + ns + ".svc", "localhost"} {
		if err := verifies(addr, name); err != nil {
			t.Errorf("the certificate does not verify as %q under the published CA: %v", name, err)
		}
	}
	if verifies(addr, "elsewhere.example.test") == nil {
		t.Error("the certificate verifies for a name it was not made for")
	}

	token := widgetHandlerToken(t, cp, ns, "handler")
	var j journal
	h := sdk.New("own-cert", sdk.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}), sdk.WithToken(token),
		sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond))
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, addr)
	create(t, dyn, widgetGVR, widget(ns, "w", map[string]any{"size": int64(1)}))
	j.waitCount(t, sdk.Create, "w", 1)

	again := startBroker(t, cp, secure)
	if err := verifies(again, ""); err != nil {
		t.Errorf("after a restart the certificate does not verify under the published CA: %v", err)
	}
}
