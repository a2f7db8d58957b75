package lifecycle

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/broker"
	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
)

// TestHandlerFollowsCARotation: a handler trusts the CA file it was given,
// a copy of the ConfigMap the broker publishes (the test plays the kubelet
// that updates a mounted ConfigMap). The CA Secret is deleted, which makes
// the broker rotate its CA: it publishes the new CA beside the old one,
// switches its serving certificate to the new CA after the overlap, and
// the handler, which reads the CA file at every connection attempt, goes on
// receiving events across broker restarts before and after the switch.
func TestHandlerFollowsCARotation(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	secure := func(o *broker.Options) {
		o.Insecure, o.TLS, o.Namespace, o.CAOverlap = false, nil, ns, 2*time.Second
	}
	caFile := filepath.Join(t.TempDir(), "ca.crt")
	var addr atomic.Value
	first, stop := startStoppableBroker(t, cp, secure)
	addr.Store(first)
	mirrorCA(t, cp, ns, caFile, 1)

	var j journal
	h := sdk.New("ca-rotation", sdk.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}), sdk.WithTLSCAFile(caFile),
		sdk.WithToken(widgetHandlerToken(t, cp, ns, "handler")), sdk.WithReconnectBackoff(50*time.Millisecond, 500*time.Millisecond),
		sdk.WithDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr.Load().(string))
		}))
	h.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, h, first)
	create(t, dyn, widgetGVR, widget(ns, "before", nil))
	j.waitCount(t, sdk.Create, "before", 1)

	// Rotate: the CA Secret is lost while no broker runs.
	stop()
	if err := cp.Client().CoreV1().Secrets(ns).Delete(t.Context(), broker.DefaultGRPCSecret+certs.CASecretSuffix, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	second, stop := startStoppableBroker(t, cp, secure)
	addr.Store(second)
	cas := mirrorCA(t, cp, ns, caFile, 2)
	create(t, dyn, widgetGVR, widget(ns, "during", nil))
	j.waitCount(t, sdk.Create, "during", 1)

	// After the overlap the broker switches to a certificate of the new
	// CA (its next refresh); a restart makes the handler reconnect to it.
	eventually(t, "the broker serves a certificate of the new CA", func() bool {
		sec, err := cp.Client().CoreV1().Secrets(ns).Get(t.Context(), broker.DefaultGRPCSecret, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		block, _ := pem.Decode(sec.Data["tls.crt"])
		leaf, err := x509.ParseCertificate(block.Bytes)
		return err == nil && leaf.CheckSignatureFrom(cas[0]) == nil
	})
	stop()
	third, _ := startStoppableBroker(t, cp, secure)
	addr.Store(third)
	create(t, dyn, widgetGVR, widget(ns, "after", nil))
	j.waitCount(t, sdk.Create, "after", 1)
}

// mirrorCA waits until the published CA bundle holds n CAs, writes it to
// file and returns them.
func mirrorCA(t *testing.T, cp *controlplane.ControlPlane, ns, file string, n int) []*x509.Certificate {
	t.Helper()
	var bundle string
	var cas []*x509.Certificate
	eventually(t, "the published CA bundle holds the CAs", func() bool {
		cm, err := cp.Client().CoreV1().ConfigMaps(ns).Get(t.Context(), broker.DefaultCAConfigMap, metav1.GetOptions{})
		if err != nil {
			return false
		}
		bundle, cas = cm.Data[broker.CAConfigMapKey], nil
		for rest := []byte(bundle); ; {
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
	if err := os.WriteFile(file, []byte(bundle), 0o600); err != nil {
		t.Fatal(err)
	}
	return cas
}
