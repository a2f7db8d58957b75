// Package certs serves a TLS certificate that renews itself: the broker's
// gRPC endpoint and its admission webhooks each have one.
//
// Given a certificate (CertFile, KeyFile, optionally CAFile, as
// cert-manager writes them), a Serving reads the files again when they
// change. Otherwise it generates a self-signed ECDSA P-256 CA and a serving
// certificate for the wanted names, kept in a Secret of the broker's
// namespace (keys ca.crt, ca.key, tls.crt, tls.key), so that replicas and
// restarts share one CA. The serving certificate is renewed on the same CA
// when less than a third of its validity is left or it does not cover the
// wanted names; writes to the Secret are create-or-take-the-winner's and
// updates guarded by its resourceVersion. Changed tells a watcher (the
// webhook configuration writer, the CA bundle publisher) when the CA bundle
// changed.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package certs
