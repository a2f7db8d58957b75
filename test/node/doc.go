// Package node runs a real one-node Kubernetes cluster on this machine, for
// the in-cluster end-to-end tests and for 'make node': the control plane of
// test/controlplane serving on the node's bridge, kube-controller-manager
// and kube-scheduler, containerd 2 with Debian's runc and CNI plugins, the
// kubelet, kube-proxy in iptables mode and CoreDNS for the cluster's names,
// Kubernetes v1.37.2 and the rest built from the Go module proxy (see
// [controlplane.EnsureNode]). The controllers, kube-proxy and CoreDNS run as
// processes on the machine, not as Pods.
//
// Pods get addresses on the bridge tether0 (10.244.0.0/24); the bridge's
// own address, 10.244.0.1, is the node's, where kube-apiserver and the
// kubelet serve, and CoreDNS (cluster.local only: Pods never use the
// machine's resolver). Services work through kube-proxy's rules, webhooks
// through their Service's endpoints. The images tether:dev (this checkout's broker
// and example handler) and the Pods' sandbox are built and imported at
// every start; there is no registry and nothing is pulled.
//
// It needs root and Debian's runc, containernetworking-plugins and
// iptables ([CheckMachine]). One node runs on a machine at a time. What a
// run changes on the machine (the bridge, two sysctls, iptables rules,
// mounts) it undoes in Stop, and a later Start undoes what a run that died
// left. Every process dies with the process that started it.
package node
