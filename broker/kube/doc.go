// Package kube is the broker's typed client of the built-in Kubernetes
// resources it reads and writes: Leases, Secrets, ConfigMaps, Namespaces,
// Events, webhook configurations, RBAC objects, the authentication and
// authorization reviews.
//
// client-go's clientset would do the same, but it and everything that
// imports it (discovery, leaderelection, the shared informers) bring in
// k8s.io/client-go/kubernetes/scheme, whose initializer registers every
// type of every built-in API group: about 10 MiB of the broker's resident
// memory, at any object count, for types the broker never uses. Interface
// has the method chains of the clientset (kube.CoreV1().Secrets(ns).Get),
// making the same requests over a Scheme that knows only these types, so
// calling code reads as before.
// TestTheBrokerDoesNotLinkClientGosScheme keeps it that way.
//
// Tests use client-go's clientsets (the fake one, the test control
// plane's) through kubetest.Wrap.
//
// Where it sits among the broker's parts: docs/design.md, "The
// architecture".
package kube
