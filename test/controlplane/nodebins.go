package controlplane

import (
	"context"
	"fmt"
	"path/filepath"
)

// ContainerdVersion is the containerd that the one-node cluster runs. It must
// match test/tools/containerd/go.mod. Kubernetes 1.36 and later need
// containerd 2 (Debian's is 1.6).
const ContainerdVersion = "v2.2.9"

// CoreDNSVersion is the cluster DNS that the one-node cluster runs. It must
// match test/tools/coredns/go.mod.
const CoreDNSVersion = "v1.15.0"

// NodeBinaries locates what a one-node cluster runs beside the control plane:
// the Kubernetes node and controller components, containerd and CoreDNS.
type NodeBinaries struct {
	Dir               string // folder holding the binaries
	Kubelet           string
	ControllerManager string // kube-controller-manager
	Scheduler         string // kube-scheduler
	Proxy             string // kube-proxy
	Containerd        string
	Shim              string // containerd-shim-runc-v2, found by containerd on its PATH
	Ctr               string // containerd's client, to import images
	CoreDNS           string // the cluster DNS
}

const (
	containerdName = "containerd"
	shimName       = "containerd-shim-runc-v2"
	ctrName        = "ctr"
	nodeStampName  = "stamp-node"
)

// nodeBinariesIn returns the paths the node binaries have inside dir.
func nodeBinariesIn(dir string) NodeBinaries {
	return NodeBinaries{
		Dir:               dir,
		Kubelet:           filepath.Join(dir, "kubelet"),
		ControllerManager: filepath.Join(dir, "kube-controller-manager"),
		Scheduler:         filepath.Join(dir, "kube-scheduler"),
		Proxy:             filepath.Join(dir, "kube-proxy"),
		Containerd:        filepath.Join(dir, containerdName),
		Shim:              filepath.Join(dir, shimName),
		Ctr:               filepath.Join(dir, ctrName),
		CoreDNS:           filepath.Join(dir, "coredns"),
	}
}

// nodeSet is what [EnsureNode] builds: the Kubernetes components from
// test/tools (they share most packages with kube-apiserver), containerd and
// CoreDNS from modules of their own. containerd is static (no cgo) and without the btrfs and
// zfs snapshotters, which need C headers; overlayfs is what it uses here.
var nodeSet = func() binarySet {
	k8s := func(name, hint string) target {
		return target{name: name, version: KubernetesVersion, pkg: "k8s.io/kubernetes/cmd/" + name, ldflags: apiserverLDFlags(),
			want: "Kubernetes " + KubernetesVersion, hint: hint}
	}
	ctrd := func(name, pkg string, versionArgs ...string) target {
		return target{name: name, version: ContainerdVersion, pkg: "github.com/containerd/containerd/v2/cmd/" + pkg,
			module: "containerd", tags: "no_btrfs,no_zfs", env: []string{"CGO_ENABLED=0"},
			want: ContainerdVersion[1:], versionArgs: versionArgs, hint: "about a minute"}
	}
	return binarySet{
		stamp:    nodeStampName,
		versions: []string{"kubernetes " + KubernetesVersion, "containerd " + ContainerdVersion, "coredns " + CoreDNSVersion},
		targets: []target{
			k8s("kubelet", "about 2 minutes after kube-apiserver"),
			k8s("kube-controller-manager", "about 2 minutes after kube-apiserver"),
			k8s("kube-scheduler", "about a minute after kube-apiserver"),
			k8s("kube-proxy", "about a minute after kube-apiserver"),
			ctrd(containerdName, containerdName),
			ctrd(shimName, shimName, "-v"),
			ctrd(ctrName, ctrName),
			{name: "coredns", version: CoreDNSVersion, pkg: "github.com/coredns/coredns", module: "coredns",
				want: "CoreDNS-" + CoreDNSVersion[1:], versionArgs: []string{"-version"}, hint: "about 5 minutes"},
		},
	}
}()

// EnsureNode returns the cached node binaries, building them first when they
// are missing, as [Ensure] does for the control plane's (same cache folder,
// own stamp). A first build takes about 8 minutes on 2 cores once
// kube-apiserver is built.
func EnsureNode(ctx context.Context, opts EnsureOptions) (NodeBinaries, error) {
	if err := opts.setDefaults(); err != nil {
		return NodeBinaries{}, fmt.Errorf("ensuring node binaries: %w", err)
	}
	if err := ensureSet(ctx, &opts, nodeSet); err != nil {
		return NodeBinaries{}, err
	}
	return nodeBinariesIn(opts.Dir), nil
}
