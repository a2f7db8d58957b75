// Package lifecycle holds the end-to-end tests of the broker's lifecycle
// core: a real kube-apiserver and etcd, the broker (in-process or as a real
// process), and handlers built on the Go SDK over a real gRPC connection.
package lifecycle
