package certs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Keys and names of the Secrets. The serving Secret (Options.SecretName)
// holds tls.crt, tls.key and the CA bundle (ca.crt); the CA Secret, named
// as the serving one plus CASecretSuffix, holds the CA that signs
// (ca.crt, ca.key), so that what serves is not what signs.
const (
	CASecretSuffix = "-ca"
	SecretCACert   = "ca.crt"
	SecretCAKey    = "ca.key"
)

// MaxSecretAttempts bounds the rounds of writing a Secret the replicas share
// (a certificate, a key) when other replicas write it at the same time.
const MaxSecretAttempts = 5

// errRace is a write that lost to another replica's: read again.
var errRace = errors.New("another replica wrote the Secret first")

// errTerminating is a create refused because the namespace is being deleted.
var errTerminating = errors.New("the namespace is being deleted")

// syncSecret makes the Secrets hold a valid CA and a serving certificate
// for the wanted names, creating, rotating or renewing them as needed, and
// serves what they hold. The Secrets are the one truth replicas and
// restarts share: whoever loses a race to write them reads them again and
// takes the winner's.
func (c *Serving) syncSecret(ctx context.Context) error {
	for range MaxSecretAttempts {
		err := c.syncOnce(ctx)
		if errors.Is(err, errRace) {
			continue
		}
		return err
	}
	return fmt.Errorf("the %s certificate Secrets %s changed %d times while they were being written; trying again later",
		c.opts.Name, c.opts.ref(c.opts.SecretName), MaxSecretAttempts)
}

func (c *Serving) syncOnce(ctx context.Context) error {
	now := c.opts.Clock.Now()
	srvSec, err := c.getSecret(ctx, c.opts.SecretName)
	if err != nil {
		return err
	}
	caSec, err := c.getSecret(ctx, c.opts.caSecretName())
	if err != nil {
		return err
	}
	ca, why, err := signingCA(c.opts, dataOf(caSec), dataOf(srvSec), now)
	if err != nil {
		return err
	}
	if why != "" {
		err = c.writeSecret(ctx, caSec, c.opts.caSecretName(), corev1.SecretTypeOpaque,
			map[string][]byte{SecretCACert: ca.certPEM, SecretCAKey: ca.keyPEM})
		if errors.Is(err, errTerminating) {
			return c.serveInMemory(ca, now)
		}
		if err != nil {
			return fmt.Errorf("writing the %s CA (%s): %w", c.opts.Name, why, err)
		}
		c.log.Info("wrote the CA", "secret", c.opts.ref(c.opts.caSecretName()), "why", why, "ca_not_after", ca.leaf().NotAfter)
	}
	p, err := planFor(c.opts, dataOf(srvSec), ca, now)
	if err != nil {
		return err
	}
	data := map[string][]byte{SecretCACert: p.bundle, corev1.TLSCertKey: p.srv.certPEM, corev1.TLSPrivateKeyKey: p.srv.keyPEM}
	if srvSec == nil || !sameData(srvSec.Data, data) {
		err = c.writeSecret(ctx, srvSec, c.opts.SecretName, corev1.SecretTypeTLS, data)
		if errors.Is(err, errTerminating) {
			return c.serveInMemory(ca, now)
		}
		if err != nil {
			return fmt.Errorf("writing the %s serving certificate (%s): %w", c.opts.Name, p.why, err)
		}
		c.log.Info("wrote the serving certificate and CA bundle", "secret", c.opts.ref(c.opts.SecretName), "why", p.why,
			"cas", p.cas, "not_after", p.srv.leaf().NotAfter)
	}
	c.use(p.srv.tls, p.bundle)
	return nil
}

// serveInMemory serves ca and a certificate of it, kept nowhere, unless
// something is served already: in an uninstall by namespace deletion the
// broker must still serve, to release its holds, and nothing can be kept.
func (c *Serving) serveInMemory(ca keyPair, now time.Time) error {
	if c.cert.Load() != nil {
		return nil
	}
	c.log.Warn("the namespace is being deleted: serving a CA and certificate kept in memory only", "secret", c.opts.ref(c.opts.SecretName))
	srv, err := newServing(c.opts.Name, ca, c.opts.DNSNames, c.opts.IPAddresses, now, c.opts.Validity)
	if err != nil {
		return fmt.Errorf("generating the %s serving certificate: %w", c.opts.Name, err)
	}
	c.use(srv.tls, ca.certPEM)
	return nil
}

// caSecretName is the Secret of the CA and its key, apart from what serves.
func (o Options) caSecretName() string { return o.SecretName + CASecretSuffix }

// ref names a Secret of the namespace for the log: "<namespace>/<name>".
func (o Options) ref(name string) string { return o.Namespace + "/" + name }

// getSecret reads the Secret name; nil when there is none.
func (c *Serving) getSecret(ctx context.Context, name string) (*corev1.Secret, error) {
	sec, err := c.opts.Client.CoreV1().Secrets(c.opts.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the %s certificate Secret %s: %w", c.opts.Name, c.opts.ref(name), err)
	}
	return sec, nil
}

// writeSecret makes the Secret name hold data and nothing else: created
// when old is nil, else updated from old (guarded by its resourceVersion).
func (c *Serving) writeSecret(ctx context.Context, old *corev1.Secret, name string, typ corev1.SecretType, data map[string][]byte) error {
	secrets := c.opts.Client.CoreV1().Secrets(c.opts.Namespace)
	var err error
	if old == nil {
		_, err = secrets.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.opts.Namespace, Labels: map[string]string{
				"app.kubernetes.io/name":      "tether-broker",
				"app.kubernetes.io/component": c.opts.Name,
			}},
			Type: typ,
			Data: data,
		}, metav1.CreateOptions{})
	} else {
		sec := old.DeepCopy()
		sec.Data = maps.Clone(data)
		_, err = secrets.Update(ctx, sec, metav1.UpdateOptions{})
	}
	switch {
	case apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err):
		return errRace
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		return errTerminating
	case err != nil:
		return fmt.Errorf("writing Secret %s: %w", c.opts.ref(name), err)
	}
	return nil
}

func dataOf(sec *corev1.Secret) map[string][]byte {
	if sec == nil {
		return nil
	}
	return sec.Data
}

func sameData(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, func(x, y []byte) bool { return string(x) == string(y) })
}
