// Package e2e holds end-to-end tests that run against a real etcd and
// kube-apiserver started by [github.com/tether-dev/tether/test/controlplane],
// one control plane per test binary (see main_test.go).
//
// The tests so far pin down the API-server behaviour the broker's hold contract
// relies on: finalizers changed with JSON patches guarded by a "test" operation,
// deletion with other controllers' finalizers present, informer events, and
// service-account tokens that pass TokenReview.
package e2e
