package certs

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// A CA is replaced with an overlap, so that no client is left trusting
// only a CA that no longer signs what it is served:
//
//  1. a new CA (the old one wore out, or the CA Secret was lost) goes into
//     the CA bundle beside the old one at once, and signs nothing yet;
//  2. once it has been published for CAOverlap (counted from its making,
//     its NotBefore plus backdate), the serving certificate is issued by
//     it: the switch;
//  3. the old CA stays in the bundle for another CAOverlap after the switch
//     (counted from the new serving certificate's making), for the replicas
//     that still serve its certificate until their next sync, then leaves.
//
// An old CA also leaves when it expires. The old CA's key is not kept: a
// serving certificate that must be renewed during the overlap (worn out,
// new names) is issued by the new CA at once.

// plan is what the serving Secret is to hold.
type plan struct {
	srv    keyPair
	bundle []byte
	cas    int    // CAs in bundle
	why    string // why it is written, for the log
}

// signingCA is the CA that signs: the CA Secret's, else the one a combined
// Secret (written before the CA had its own) kept beside the serving key,
// else a new one. why says why it is to be written ("" when it is the CA
// Secret's own).
func signingCA(opts Options, caData, srvData map[string][]byte, now time.Time) (ca keyPair, why string, err error) {
	ca, err = parseKeyPair(caData[SecretCACert], caData[SecretCAKey])
	if why = caFault(ca, err, now); why == "" {
		return ca, "", nil
	}
	if srvData[SecretCAKey] != nil {
		legacy, err := parseKeyPair(srvData[SecretCACert], srvData[SecretCAKey])
		if caFault(legacy, err, now) == "" {
			return legacy, "moving the CA key out of the serving Secret into its own", nil
		}
	}
	if ca, err = newCA(opts.Name, now, opts.CAValidity); err != nil {
		return ca, why, fmt.Errorf("generating the %s CA: %w", opts.Name, err)
	}
	return ca, why, nil
}

// caFault says what is wrong with a CA parsed with err; "" when nothing.
func caFault(ca keyPair, err error, now time.Time) string {
	switch {
	case err != nil:
		return fmt.Sprintf("the CA is missing or invalid: %v", err)
	case !ca.leaf().IsCA:
		return "the CA certificate is not a CA"
	case wornOut(ca.leaf(), now):
		return "less than a third of the CA's validity is left"
	}
	return ""
}

// madeAt is when a certificate this package made was made.
func madeAt(cert *x509.Certificate) time.Time { return cert.NotBefore.Add(backdate) }

// planFor judges the serving Secret's data against the signing CA: the
// serving certificate to serve (renewed or switched when due) and the CA
// bundle to publish.
func planFor(opts Options, srvData map[string][]byte, ca keyPair, now time.Time) (plan, error) {
	olds := olderCAs(srvData[SecretCACert], ca.leaf(), now)
	srv, why, dns, ips := judgeServing(opts, srvData, ca, olds, now)
	if why != "" {
		var err error
		if srv, err = newServing(opts.Name, ca, dns, ips, now, opts.Validity); err != nil {
			return plan{}, fmt.Errorf("generating the %s serving certificate: %w", opts.Name, err)
		}
	}
	if srv.leaf().CheckSignatureFrom(ca.leaf()) == nil && !now.Before(madeAt(srv.leaf()).Add(opts.CAOverlap)) {
		olds = nil // an overlap after the switch
	}
	bundle := bytes.Clone(ca.certPEM)
	for _, o := range olds {
		bundle = append(bundle, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: o.Raw})...)
	}
	if why == "" {
		why = "the CA bundle changed"
	}
	return plan{srv: srv, bundle: bundle, cas: 1 + len(olds), why: why}, nil
}

// judgeServing returns the Secret's serving certificate and "" when it is
// to be kept, or why it is to be replaced and the names the new one is for.
func judgeServing(opts Options, srvData map[string][]byte, ca keyPair, olds []*x509.Certificate, now time.Time) (srv keyPair, why string, dns []string, ips []net.IP) {
	dns, ips = opts.DNSNames, opts.IPAddresses
	srv, err := parseKeyPair(srvData[corev1.TLSCertKey], srvData[corev1.TLSPrivateKeyKey])
	if err != nil {
		return srv, fmt.Sprintf("the serving certificate is missing or invalid: %v", err), dns, ips
	}
	leaf := srv.leaf()
	byNew := leaf.CheckSignatureFrom(ca.leaf()) == nil
	switch {
	case !byNew && !signedByAny(leaf, olds):
		why = "the serving certificate is not signed by a CA of the bundle"
	case !byNew && !now.Before(madeAt(ca.leaf()).Add(opts.CAOverlap)):
		why = "the new CA has been published for the overlap: switching to it"
	case wornOut(leaf, now):
		why = "less than a third of the serving certificate's validity is left"
	case !covers(leaf, dns, ips):
		why = fmt.Sprintf("the serving certificate does not cover %v %v", dns, ips)
		// Keep the names it had: during a rolling update that changes
		// them, old and new replicas would otherwise take turns renewing.
		dns, ips = unionNames(dns, ips, leaf)
	}
	return srv, why, dns, ips
}

// olderCAs are the CA certificates of bundle other than ca that have not
// expired at now.
func olderCAs(bundle []byte, ca *x509.Certificate, now time.Time) []*x509.Certificate {
	var out []*x509.Certificate
	for rest := bundle; ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			return out
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil || !cert.IsCA || cert.Equal(ca) || !now.Before(cert.NotAfter) {
			continue
		}
		out = append(out, cert)
	}
}

func signedByAny(leaf *x509.Certificate, cas []*x509.Certificate) bool {
	for _, ca := range cas {
		if leaf.CheckSignatureFrom(ca) == nil {
			return true
		}
	}
	return false
}
