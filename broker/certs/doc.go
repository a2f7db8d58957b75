// Package certs serves a TLS certificate that renews itself: the broker's
// gRPC endpoint and its admission webhooks each have one.
//
// Given a certificate (CertFile, KeyFile, optionally CAFile, as
// cert-manager writes them), a Serving reads the files again when they
// change. Otherwise it generates a self-signed ECDSA P-256 CA and a serving
// certificate for the wanted names, kept in two Secrets of the broker's
// namespace so that replicas and restarts share one CA, and so that what
// serves is not what signs: the serving Secret (tls.crt, tls.key and the CA
// bundle ca.crt) and the CA Secret, its name plus CASecretSuffix (ca.crt,
// ca.key). A Secret written before the CA had its own is split on start.
//
// The serving certificate is renewed on the same CA when less than a third
// of its validity is left or it does not cover the wanted names. A CA with
// less than a third left, or lost with its Secret, is replaced with an
// overlap (rotation.go): the new CA is published beside the old one first,
// signs the serving certificate only CAOverlap later, and the old one
// leaves the bundle CAOverlap after that. Writes to the Secrets are
// create-or-take-the-winner's and updates guarded by their resourceVersion.
// Changed tells a watcher (the webhook configuration writer, the CA bundle
// publisher) when the CA bundle changed.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package certs
