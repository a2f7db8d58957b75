// Package controlplane builds, starts and stops a real Kubernetes control plane
// (etcd and kube-apiserver) as plain local processes, for the end-to-end tests
// and for 'make cluster'.
//
// The two binaries, and a kubectl of the same version for tests that apply
// manifests, are built once from the Go module proxy by the nested module in
// test/tools and cached in a folder shared by every later run (see [CacheDir]
// and [Ensure]). [Start] then launches etcd and kube-apiserver on free loopback
// ports with RBAC, token authentication and service-account tokens turned on,
// waits until the API server is ready and writes an admin kubeconfig.
//
// Every process the package starts dies with the process that started it, even
// when that process panics, times out or is killed with SIGKILL: children are
// forked from one OS thread that never exits, with a parent-death signal.
//
// There is no kube-controller-manager, scheduler or kubelet: namespaces are never
// finalized (they stay Terminating after deletion), garbage collection does not
// run and workloads get no Pods. Finalizers, deletionTimestamp, RBAC, TokenReview,
// SubjectAccessReview and admission webhooks behave as in any cluster.
//
// In tests, call [RunTests] from TestMain to get one control plane per test
// package, and [Get] in each test:
//
//	func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }
//
//	func TestSomething(t *testing.T) {
//		cp := controlplane.Get(t)
//		ns := cp.Namespace(t)
//		...
//	}
package controlplane
