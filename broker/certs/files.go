package certs

import (
	"crypto/x509"
	"fmt"
	"os"
	"slices"
	"time"
)

// fileStamp is what tells a changed file: kubelet and cert-manager replace
// files (by symlink swaps in Secret volumes), which changes both.
type fileStamp struct {
	modTime time.Time
	size    int64
}

// loadFiles reads the given certificate, key and CA files, unless force is
// false and none changed since the last load.
func (c *Serving) loadFiles(force bool) error {
	paths := []string{c.opts.CertFile, c.opts.KeyFile}
	if c.opts.CAFile != "" {
		paths = append(paths, c.opts.CAFile)
	}
	stamps := make([]fileStamp, len(paths))
	for i, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("checking the %s certificate file: %w", c.opts.Name, err)
		}
		stamps[i] = fileStamp{modTime: fi.ModTime(), size: fi.Size()}
	}
	if !force && slices.Equal(stamps, c.stamps) {
		return nil
	}
	certPEM, err := os.ReadFile(c.opts.CertFile)
	if err != nil {
		return fmt.Errorf("reading the %s certificate: %w", c.opts.Name, err)
	}
	keyPEM, err := os.ReadFile(c.opts.KeyFile)
	if err != nil {
		return fmt.Errorf("reading the %s certificate's key: %w", c.opts.Name, err)
	}
	kp, err := parseKeyPair(certPEM, keyPEM)
	if err != nil {
		return fmt.Errorf("loading the %s certificate %s and key %s: %w", c.opts.Name, c.opts.CertFile, c.opts.KeyFile, err)
	}
	var bundle []byte
	if c.opts.CAFile != "" {
		if bundle, err = os.ReadFile(c.opts.CAFile); err != nil {
			return fmt.Errorf("reading the %s CA bundle: %w", c.opts.Name, err)
		}
		if !x509.NewCertPool().AppendCertsFromPEM(bundle) {
			return fmt.Errorf("the %s CA bundle %s has no PEM certificate", c.opts.Name, c.opts.CAFile)
		}
	}
	if c.stamps != nil {
		c.log.Info("reloaded the certificate files", "cert", c.opts.CertFile,
			"not_after", kp.leaf().NotAfter)
	}
	c.stamps = stamps
	c.use(kp.tls, bundle)
	return nil
}
