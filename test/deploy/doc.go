// Package deploy tests the manifests in deploy/ against a real API server.
//
// The tests build the manifests with the kubectl that test/controlplane builds
// next to etcd and kube-apiserver (kubectl kustomize), apply them with
// 'kubectl apply -k deploy/ --server-side' to the package's control plane and
// check what landed: the Namespace, the ServiceAccounts, the exact RBAC rules,
// the Deployments (replicas, arguments, probes, resources, security context),
// the Service ports and the PodDisruptionBudget. The RBAC tests ask the API
// server (SubjectAccessReview, real RBAC) what the broker's and the example
// handler's ServiceAccounts may and may not do, and then act as the broker
// with a real token of its ServiceAccount: list and watch, patch finalizers
// and status, post Events, write Leases, read its Deployment, and be refused
// what it must not do.
//
// No Pod runs: the control plane has no scheduler, controller manager or
// kubelet, so the Deployments get no ReplicaSets and no Pods, and the image is
// never pulled or started. Pods built from the Deployments' templates are
// created with a server-side dry run instead, which runs admission (Pod
// Security "restricted", ServiceAccount) on them. Whether the broker starts,
// passes its probes and serves in a cluster is not proven here; the kind
// walkthrough in deploy/README.md is the way to see that. The flag test checks
// that every flag the manifests pass exists in the broker and the example
// handler.
package deploy
