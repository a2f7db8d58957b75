package certs

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys of the Secret besides tls.crt and tls.key: the CA, whose key every
// replica needs to renew the serving certificate on the same CA.
const (
	SecretCACert = "ca.crt"
	SecretCAKey  = "ca.key"
)

// MaxSecretAttempts bounds the rounds of writing a Secret the replicas share
// (a certificate, a key) when other replicas write it at the same time.
const MaxSecretAttempts = 5

// syncSecret makes the Secret hold a valid CA and a serving certificate
// for the wanted names, creating or renewing them as needed, and serves
// what it holds. The Secret is the one truth replicas and restarts share:
// whoever loses a race to write it reads it again and takes the winner's.
func (c *Serving) syncSecret(ctx context.Context) error {
	secrets := c.opts.Client.CoreV1().Secrets(c.opts.Namespace)
	ref := c.opts.Namespace + "/" + c.opts.SecretName
	for range MaxSecretAttempts {
		sec, err := secrets.Get(ctx, c.opts.SecretName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			ca, srv, err := c.generate(time.Now())
			if err != nil {
				return err
			}
			sec = &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{
					Name:      c.opts.SecretName,
					Namespace: c.opts.Namespace,
					Labels: map[string]string{
						"app.kubernetes.io/name":      "tether-broker",
						"app.kubernetes.io/component": c.opts.Name,
					},
				},
				Type: corev1.SecretTypeTLS,
				Data: secretData(ca, srv),
			}
			_, err = secrets.Create(ctx, sec, metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				continue // another replica created it first: take theirs
			}
			if apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause) {
				// An uninstall by namespace deletion: the broker must still
				// serve, to release its holds, and nothing can be kept.
				// What is served already stays.
				if c.cert.Load() == nil {
					c.log.Warn("the namespace is being deleted: serving a CA and certificate kept in memory only", "secret", ref)
					c.use(srv.tls, ca.certPEM)
				}
				return nil
			}
			if err != nil {
				return fmt.Errorf("creating the %s certificate Secret %s: %w", c.opts.Name, ref, err)
			}
			c.log.Info("created the CA and serving certificate", "secret", ref,
				"ca_not_after", ca.leaf().NotAfter, "not_after", srv.leaf().NotAfter)
			c.use(srv.tls, ca.certPEM)
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading the %s certificate Secret %s: %w", c.opts.Name, ref, err)
		}
		ca, srv, why, err := c.renewal(sec.Data, time.Now())
		if err != nil {
			return err
		}
		if why == "" {
			c.use(srv.tls, ca.certPEM)
			return nil
		}
		sec = sec.DeepCopy()
		if sec.Data == nil {
			sec.Data = map[string][]byte{}
		}
		maps.Copy(sec.Data, secretData(ca, srv))
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			continue // another replica renewed it first: judge theirs
		}
		if err != nil {
			return fmt.Errorf("renewing the %s certificate in Secret %s (%s): %w", c.opts.Name, ref, why, err)
		}
		c.log.Info("renewed the certificate", "secret", ref, "why", why,
			"ca_not_after", ca.leaf().NotAfter, "not_after", srv.leaf().NotAfter)
		c.use(srv.tls, ca.certPEM)
		return nil
	}
	return fmt.Errorf("the %s certificate Secret %s changed %d times while it was being written; trying again later", c.opts.Name, ref, MaxSecretAttempts)
}

// generate makes a new CA and a serving certificate for the wanted names.
func (c *Serving) generate(now time.Time) (ca, srv keyPair, err error) {
	if ca, err = newCA(c.opts.Name, now, c.opts.CAValidity); err != nil {
		return ca, srv, fmt.Errorf("generating the %s CA: %w", c.opts.Name, err)
	}
	if srv, err = newServing(c.opts.Name, ca, c.opts.DNSNames, c.opts.IPAddresses, now, c.opts.Validity); err != nil {
		return ca, srv, fmt.Errorf("generating the %s serving certificate: %w", c.opts.Name, err)
	}
	return ca, srv, nil
}

// renewal judges the Secret's data: it returns the CA and serving
// certificate to serve, and why they are new ("" when they are the
// Secret's own and still good).
func (c *Serving) renewal(data map[string][]byte, now time.Time) (ca, srv keyPair, why string, err error) {
	ca, err = parseKeyPair(data[SecretCACert], data[SecretCAKey])
	switch {
	case err != nil:
		why = fmt.Sprintf("the CA is missing or invalid: %v", err)
	case !ca.leaf().IsCA:
		why = "the CA certificate is not a CA"
	case wornOut(ca.leaf(), now):
		why = "less than a third of the CA's validity is left"
	}
	if why != "" {
		// A new CA invalidates the CA bundle the webhook configurations
		// carry until they are written again (Changed); rare by design.
		ca, srv, err = c.generate(now)
		return ca, srv, why, err
	}
	dns, ips := c.opts.DNSNames, c.opts.IPAddresses
	srv, err = parseKeyPair(data[corev1.TLSCertKey], data[corev1.TLSPrivateKeyKey])
	switch {
	case err != nil:
		why = fmt.Sprintf("the serving certificate is missing or invalid: %v", err)
	case srv.leaf().CheckSignatureFrom(ca.leaf()) != nil:
		why = "the serving certificate is not signed by the CA"
	case wornOut(srv.leaf(), now):
		why = "less than a third of the serving certificate's validity is left"
	case !covers(srv.leaf(), dns, ips):
		why = fmt.Sprintf("the serving certificate does not cover %v %v", dns, ips)
		// Keep the names it had: during a rolling update that changes
		// them, old and new replicas would otherwise take turns renewing.
		dns, ips = unionNames(dns, ips, srv.leaf())
	default:
		return ca, srv, "", nil
	}
	if srv, err = newServing(c.opts.Name, ca, dns, ips, now, c.opts.Validity); err != nil {
		return ca, srv, why, fmt.Errorf("generating the %s serving certificate: %w", c.opts.Name, err)
	}
	return ca, srv, why, nil
}

func secretData(ca, srv keyPair) map[string][]byte {
	return map[string][]byte{
		SecretCACert:            ca.certPEM,
		SecretCAKey:             ca.keyPEM,
		corev1.TLSCertKey:       srv.certPEM,
		corev1.TLSPrivateKeyKey: srv.keyPEM,
	}
}
