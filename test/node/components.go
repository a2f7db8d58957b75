package node

import (
	"fmt"
	"os"
	"path/filepath"
)

// NodeName is the name the node registers as.
const NodeName = "tether-node"

// ClusterDomain is the DNS domain of the cluster's Services.
const ClusterDomain = "cluster.local"

// kubeletConfig is the kubelet's configuration for one run, in dir.
//
// cgroups on this kind of machine are v1 (hybrid) and owned by no systemd:
// failCgroupV1 off, the cgroupfs driver, no QoS cgroups and no node
// allocatable. Anonymous requests are allowed: the kubelet serves on the
// run's bridge only, and kube-apiserver, which calls it for logs, exec and
// port-forward, has no client certificate for it. Images are never
// collected (they are imported, not pulled) and eviction only at 1% free.
// Pods resolve names with the cluster DNS only, never the machine's
// resolver: nothing they look up leaves the run.
func kubeletConfig(dir, containerdSocket string, healthzPort int) string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: %d
authentication:
  anonymous:
    enabled: true
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
containerRuntimeEndpoint: unix://%s
cgroupDriver: cgroupfs
cgroupsPerQOS: false
enforceNodeAllocatable: []
failCgroupV1: false
failSwapOn: false
localStorageCapacityIsolation: false
podLogsDir: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%%
  imagefs.available: 1%%
clusterDomain: %s
clusterDNS: [%s]
resolvConf: ""
serializeImagePulls: false
`, Address, healthzPort, containerdSocket, filepath.Join(dir, "pod-logs"), ClusterDomain, Address)
}

// corefile is CoreDNS's configuration: the cluster's Services and Pods,
// served on the node's address, and nothing else (no forwarding: other
// names are refused). ready answers on readyPort once the Services are
// listed.
func corefile(kubeconfig string, readyPort int) string {
	return fmt.Sprintf(`%s:53 {
    bind %s
    errors
    ready 127.0.0.1:%d
    kubernetes %s {
        kubeconfig %s
        pods insecure
    }
}
`, ClusterDomain, Address, readyPort, ClusterDomain, kubeconfig)
}

// kubeletArgs are the kubelet's flags besides its configuration file.
func kubeletArgs(dir, kubeconfig string) []string {
	return []string{
		"--config", filepath.Join(dir, "config.yaml"),
		"--kubeconfig", kubeconfig,
		"--root-dir", filepath.Join(dir, "root"),
		"--cert-dir", filepath.Join(dir, "pki"),
		"--node-ip", Address,
		"--hostname-override", NodeName,
		"--v", "2",
	}
}

// proxyConfig is kube-proxy's configuration: iptables mode, NodePorts on the
// bridge's address only, and conntrack left as the machine has it.
func proxyConfig(kubeconfig string, healthzPort, metricsPort int) string {
	return fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
clientConnection:
  kubeconfig: %s
hostnameOverride: %s
clusterCIDR: %s
bindAddress: 127.0.0.1
healthzBindAddress: 127.0.0.1:%d
metricsBindAddress: 127.0.0.1:%d
nodePortAddresses: [%s/32]
conntrack:
  maxPerCore: 0
iptables:
  localhostNodePorts: false
`, kubeconfig, NodeName, PodCIDR, healthzPort, metricsPort, Address)
}

// controllerManagerArgs runs every default controller, each with its own
// service account as in a real cluster, signing service-account tokens with
// the control plane's key.
func controllerManagerArgs(kubeconfig, saKey, rootCA string) []string {
	return []string{
		"--kubeconfig", kubeconfig,
		"--service-account-private-key-file", saKey,
		"--root-ca-file", rootCA,
		"--use-service-account-credentials",
		"--cluster-cidr", PodCIDR,
		"--service-cluster-ip-range", ServiceCIDR,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
	}
}

// schedulerArgs runs the default scheduler.
func schedulerArgs(kubeconfig string) []string {
	return []string{
		"--kubeconfig", kubeconfig,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1",
		"--secure-port", "0",
	}
}

// writeFile writes data to dir/name, making dir.
func writeFile(dir, name, data string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("making %s: %w", dir, err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, nil
}
