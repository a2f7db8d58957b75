// Package kubeconfig finds the cluster the way kubectl does, for handlers
// that also talk to the API server and for the broker's own binary: an
// explicit path, then $KUBECONFIG, then the in-cluster service account,
// then ~/.kube/config.
package kubeconfig

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Load returns the client config and says where it came from. path may be
// empty. The in-cluster service account is tried only inside a cluster
// ($KUBERNETES_SERVICE_HOST set).
func Load(path string) (cfg *rest.Config, source string, err error) {
	fromFiles := func(rules *clientcmd.ClientConfigLoadingRules, what string) (*rest.Config, string, error) {
		cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
		if err != nil {
			return nil, "", fmt.Errorf("loading %s: %w", what, err)
		}
		return cfg, what, nil
	}
	if path != "" {
		return fromFiles(&clientcmd.ClientConfigLoadingRules{ExplicitPath: path}, "kubeconfig "+path)
	}
	if os.Getenv("KUBECONFIG") != "" {
		return fromFiles(clientcmd.NewDefaultClientConfigLoadingRules(), "$KUBECONFIG")
	}
	if os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, "", fmt.Errorf("loading the in-cluster config: %w", err)
		}
		return cfg, "in-cluster service account", nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return nil, "", fmt.Errorf("no kubeconfig given and no home directory: %w", err)
	}
	p := filepath.Join(home, ".kube", "config")
	if _, err := os.Stat(p); err != nil {
		return nil, "", fmt.Errorf("no cluster found: pass --kubeconfig, set $KUBECONFIG, run in a cluster, or create %s (try 'make cluster')", p)
	}
	return fromFiles(&clientcmd.ClientConfigLoadingRules{ExplicitPath: p}, "kubeconfig "+p)
}
