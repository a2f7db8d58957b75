package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/tether-dev/tether/broker/kube/kubetest"
)

// The rotation tests drive a fake clock over a fake clientset: what they
// check is the order of publishing and switching, not the API server.

const (
	rotNS      = "tether-system"
	rotOverlap = time.Hour
)

// rotating is a Serving in generated mode on a fake clientset and clock.
type rotating struct {
	*Serving
	client kubernetes.Interface
	clock  *testingclock.FakePassiveClock
}

func newRotating(t *testing.T, client kubernetes.Interface, now time.Time) rotating {
	t.Helper()
	clk := testingclock.NewFakePassiveClock(now)
	c, err := New(Options{Name: "test", Client: kubetest.Wrap(client), Namespace: rotNS, SecretName: testSecret, DNSNames: testDNS,
		IPAddresses: testIPs, Log: testLogger(t), Clock: clk, CAOverlap: rotOverlap})
	if err != nil {
		t.Fatal(err)
	}
	return rotating{Serving: c, client: client, clock: clk}
}

// sync is one round of the loop of Start at the fake clock's time.
func (r rotating) sync(t *testing.T) {
	t.Helper()
	if err := r.refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
}

func (r rotating) advance(d time.Duration) { r.clock.SetTime(r.clock.Now().Add(d)) }

func (r rotating) secret(t *testing.T, name string) *corev1.Secret {
	t.Helper()
	sec, err := r.client.CoreV1().Secrets(rotNS).Get(t.Context(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// bundleCAs are the certificates of c's CA bundle, in order.
func bundleCAs(t *testing.T, c *Serving) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	rest := c.CABundle()
	for {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, cert)
	}
}

// signer is the CA of the bundle that signed what c serves.
func signer(t *testing.T, c *Serving) *x509.Certificate {
	t.Helper()
	leaf := serving(t, c)
	for _, ca := range bundleCAs(t, c) {
		if leaf.CheckSignatureFrom(ca) == nil {
			return ca
		}
	}
	t.Fatal("no CA of the bundle signed the serving certificate")
	return nil
}

func sameCAs(got []*x509.Certificate, want ...*x509.Certificate) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range got {
		if !bytes.Equal(got[i].Raw, want[i].Raw) {
			return false
		}
	}
	return true
}

func changed(c *Serving) bool {
	select {
	case <-c.Changed():
		return true
	default:
		return false
	}
}

// TestLostCASecretRotatesWithOverlap: the CA Secret is deleted (by hand, to
// rotate the CA, or by accident). The broker makes a new CA and publishes
// it beside the old one at once, but serves the certificate of the old CA
// until the overlap has passed, so that clients can learn the new CA
// first; the old CA leaves the bundle an overlap after the switch.
func TestLostCASecretRotatesWithOverlap(t *testing.T) {
	r := newRotating(t, fake.NewClientset(), time.Now())
	r.sync(t)
	first := bundleCAs(t, r.Serving)
	if len(first) != 1 {
		t.Fatalf("a first start publishes %d CAs, want 1", len(first))
	}
	old := first[0]
	if err := r.client.CoreV1().Secrets(rotNS).Delete(t.Context(), testSecret+CASecretSuffix, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	r.advance(time.Minute)
	r.sync(t)
	during := bundleCAs(t, r.Serving)
	if len(during) != 2 || !sameCAs(during[1:], old) {
		t.Fatalf("after the CA Secret was lost the bundle holds %d CAs (the old one second: %v), want the new and the old", len(during), len(during) == 2 && sameCAs(during[1:], old))
	}
	if !changed(r.Serving) {
		t.Error("publishing the new CA did not signal Changed")
	}
	if !signer(t, r.Serving).Equal(old) {
		t.Error("the serving certificate switched to the new CA before the overlap passed")
	}

	r.advance(rotOverlap - time.Second)
	r.sync(t)
	if !signer(t, r.Serving).Equal(old) {
		t.Error("the serving certificate switched to the new CA a second before the overlap passed")
	}
	r.advance(2 * time.Second)
	r.sync(t)
	if !signer(t, r.Serving).Equal(during[0]) {
		t.Error("the serving certificate is not the new CA's once the overlap passed")
	}
	if !sameCAs(bundleCAs(t, r.Serving), during...) {
		t.Error("the old CA left the bundle at the switch, not an overlap later")
	}

	r.advance(rotOverlap + time.Second)
	r.sync(t)
	if !sameCAs(bundleCAs(t, r.Serving), during[0]) {
		t.Errorf("an overlap after the switch the bundle holds %d CAs, want the new one alone", len(bundleCAs(t, r.Serving)))
	}
	if !changed(r.Serving) {
		t.Error("dropping the old CA did not signal Changed")
	}
	if got := r.secret(t, testSecret).Data[SecretCACert]; !bytes.Equal(got, r.CABundle()) {
		t.Error("the serving Secret's ca.crt is not the bundle served")
	}
}

// TestWornOutCARotatesWithOverlap: a CA with less than a third of its
// validity left is replaced the same way: both published, the switch after
// the overlap.
func TestWornOutCARotatesWithOverlap(t *testing.T) {
	now := time.Now()
	ca, err := newCA("test", now.Add(-8*365*24*time.Hour), DefaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServing("test", ca, testDNS, testIPs, now.Add(-time.Hour), DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: testSecret + CASecretSuffix, Namespace: rotNS},
			Data: map[string][]byte{SecretCACert: ca.certPEM, SecretCAKey: ca.keyPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: rotNS}, Type: corev1.SecretTypeTLS,
			Data: map[string][]byte{SecretCACert: ca.certPEM, corev1.TLSCertKey: srv.certPEM, corev1.TLSPrivateKeyKey: srv.keyPEM}},
	)
	r := newRotating(t, client, now)
	r.sync(t)
	cas := bundleCAs(t, r.Serving)
	if len(cas) != 2 || !cas[1].Equal(ca.leaf()) {
		t.Fatalf("with a worn-out CA the bundle holds %d CAs, want a new one and the old", len(cas))
	}
	if !serving(t, r.Serving).Equal(srv.leaf()) {
		t.Error("the serving certificate was replaced before the overlap passed")
	}
	r.advance(rotOverlap + time.Second)
	r.sync(t)
	if !signer(t, r.Serving).Equal(cas[0]) {
		t.Error("the serving certificate is not the new CA's once the overlap passed")
	}
}

// TestCombinedSecretSplit: a Secret written before the CA had its own (CA
// key beside the serving key) is split on start: the same CA and key move
// to the CA Secret, the serving Secret keeps no CA key, and what is served
// does not change.
func TestCombinedSecretSplit(t *testing.T) {
	now := time.Now()
	ca, err := newCA("test", now.Add(-time.Hour), DefaultCAValidity)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := newServing("test", ca, testDNS, testIPs, now.Add(-time.Hour), DefaultValidity)
	if err != nil {
		t.Fatal(err)
	}
	client := fake.NewClientset(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: testSecret, Namespace: rotNS}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{SecretCACert: ca.certPEM, SecretCAKey: ca.keyPEM, corev1.TLSCertKey: srv.certPEM, corev1.TLSPrivateKeyKey: srv.keyPEM}})
	r := newRotating(t, client, now)
	r.sync(t)
	caSec := r.secret(t, testSecret+CASecretSuffix)
	if !bytes.Equal(caSec.Data[SecretCACert], ca.certPEM) || !bytes.Equal(caSec.Data[SecretCAKey], ca.keyPEM) {
		t.Error("the CA Secret does not hold the combined Secret's CA and key")
	}
	srvSec := r.secret(t, testSecret)
	if _, ok := srvSec.Data[SecretCAKey]; ok {
		t.Error("the serving Secret still holds the CA key")
	}
	if !bytes.Equal(srvSec.Data[corev1.TLSCertKey], srv.certPEM) || !serving(t, r.Serving).Equal(srv.leaf()) {
		t.Error("splitting the Secret changed the serving certificate")
	}
	if !sameCAs(bundleCAs(t, r.Serving), ca.leaf()) {
		t.Error("splitting the Secret changed the CA bundle")
	}
}
