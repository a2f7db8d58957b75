package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"slices"
	"time"
)

// backdate moves NotBefore into the past, so that an API server whose clock
// runs a little behind the broker's still accepts a fresh certificate.
const backdate = 5 * time.Minute

// keyPair is a certificate with its private key, in PEM and parsed.
type keyPair struct {
	certPEM, keyPEM []byte
	tls             tls.Certificate // Leaf is set
}

func (k keyPair) leaf() *x509.Certificate { return k.tls.Leaf }

// parseKeyPair parses a PEM certificate and its key and checks they match.
func parseKeyPair(certPEM, keyPEM []byte) (keyPair, error) {
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return keyPair{}, errors.New("certificate or key missing")
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return keyPair{}, err
	}
	if c.Leaf == nil {
		if c.Leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return keyPair{}, err
		}
	}
	return keyPair{certPEM: certPEM, keyPEM: keyPEM, tls: c}, nil
}

// newCA makes a self-signed ECDSA P-256 CA valid from now for validity.
func newCA(name string, now time.Time, validity time.Duration) (keyPair, error) {
	tmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: fmt.Sprintf("tether-%s-ca@%d", name, now.Unix())},
		NotBefore:             now.Add(-backdate),
		NotAfter:              now.Add(validity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	return issue(tmpl, nil)
}

// newServing makes a serving certificate for dns and ips signed by ca,
// valid from notBefore (minus backdate) for validity, but not past the CA.
func newServing(name string, ca keyPair, dns []string, ips []net.IP, notBefore time.Time, validity time.Duration) (keyPair, error) {
	cn := "tether-" + name
	if len(dns) > 0 {
		cn = dns[0]
	}
	notAfter := notBefore.Add(validity)
	if notAfter.After(ca.leaf().NotAfter) {
		notAfter = ca.leaf().NotAfter
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: cn},
		NotBefore:   notBefore.Add(-backdate),
		NotAfter:    notAfter,
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:    slices.Clone(dns),
		IPAddresses: slices.Clone(ips),
	}
	return issue(tmpl, &ca)
}

// issue makes a key and a certificate from tmpl, signed by parent or, when
// parent is nil, by itself.
func issue(tmpl *x509.Certificate, parent *keyPair) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, fmt.Errorf("generating a key: %w", err)
	}
	if tmpl.SerialNumber, err = rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128)); err != nil {
		return keyPair{}, fmt.Errorf("generating a serial number: %w", err)
	}
	signer, issuer := crypto.Signer(key), tmpl
	if parent != nil {
		s, ok := parent.tls.PrivateKey.(crypto.Signer)
		if !ok {
			return keyPair{}, fmt.Errorf("the CA key is a %T, which cannot sign", parent.tls.PrivateKey)
		}
		signer, issuer = s, parent.leaf()
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, issuer, key.Public(), signer)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing a certificate: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return keyPair{}, fmt.Errorf("encoding a key: %w", err)
	}
	return parseKeyPair(
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	)
}

// covers reports whether cert is valid for every name in dns and ips.
func covers(cert *x509.Certificate, dns []string, ips []net.IP) bool {
	for _, d := range dns {
		if cert.VerifyHostname(d) != nil {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// wornOut reports whether less than a third of cert's validity is left at
// now: time to renew it, long before clients see it expire.
func wornOut(cert *x509.Certificate, now time.Time) bool {
	return cert.NotAfter.Sub(now) < cert.NotAfter.Sub(cert.NotBefore)/3
}

// unionNames adds to dns and ips the names cert has that they lack.
func unionNames(dns []string, ips []net.IP, cert *x509.Certificate) ([]string, []net.IP) {
	dns, ips = slices.Clone(dns), slices.Clone(ips)
	for _, d := range cert.DNSNames {
		if !slices.Contains(dns, d) {
			dns = append(dns, d)
		}
	}
	for _, ip := range cert.IPAddresses {
		if !slices.ContainsFunc(ips, ip.Equal) {
			ips = append(ips, ip)
		}
	}
	return dns, ips
}
