package controlplane

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeServiceAccountKeys writes an RSA key pair for signing and verifying
// service-account tokens: key (PKCS#1 private key) and pub (PKIX public key).
func writeServiceAccountKeys(key, pub string) error {
	k, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return fmt.Errorf("generating the service-account RSA key: %w", err)
	}
	priv := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)})
	if err := os.WriteFile(key, priv, 0o600); err != nil {
		return fmt.Errorf("writing the service-account private key: %w", err)
	}
	der, err := x509.MarshalPKIXPublicKey(&k.PublicKey)
	if err != nil {
		return fmt.Errorf("encoding the service-account public key: %w", err)
	}
	if err := os.WriteFile(pub, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), 0o644); err != nil {
		return fmt.Errorf("writing the service-account public key: %w", err)
	}
	return nil
}

// randomHex returns n random bytes as hex.
func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("reading random bytes: %w", err)
	}
	return hex.EncodeToString(b), nil
}

// writeTokenFile writes a static token file giving token to user "admin" in
// group system:masters.
func writeTokenFile(path, token string) error {
	line := token + `,admin,admin,"system:masters"` + "\n"
	if err := os.WriteFile(path, []byte(line), 0o600); err != nil {
		return fmt.Errorf("writing the token file: %w", err)
	}
	return nil
}

// FreePorts returns n distinct free TCP ports on 127.0.0.1. All listeners are
// held until every port is chosen, so the ports differ; another process may
// still take one before it is used, which Start handles by retrying.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free loopback port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// servingCA returns the PEM certificates kube-apiserver generated in certDir
// for its serving certificate, if they let a client verify url's host.
func servingCA(certDir, url string) ([]byte, bool) {
	data, err := os.ReadFile(filepath.Join(certDir, "apiserver.crt"))
	if err != nil {
		return nil, false
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, false
	}
	client := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	defer client.CloseIdleConnections()
	resp, err := client.Get(url + "/livez")
	if err != nil {
		return nil, false // a TLS verification failure lands here
	}
	_ = resp.Body.Close()
	return data, true
}

// writeKubeconfig writes an admin kubeconfig for server to path.
func writeKubeconfig(path, server, token string, caData []byte) error {
	cluster := &clientcmdapi.Cluster{Server: server}
	if len(caData) > 0 {
		cluster.CertificateAuthorityData = caData
	} else {
		cluster.InsecureSkipTLSVerify = true
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["tether"] = cluster
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["tether"] = &clientcmdapi.Context{Cluster: "tether", AuthInfo: "admin", Namespace: "default"}
	cfg.CurrentContext = "tether"
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("creating the folder of kubeconfig %s: %w", path, err)
	}
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		return fmt.Errorf("writing kubeconfig %s: %w", path, err)
	}
	return nil
}

// tempDirPrefix names the folders Start creates; the pid lets a later Start
// remove folders left behind by a process that was killed.
const tempDirPrefix = "tether-controlplane-"

// removeStaleTempDirs removes folders under os.TempDir() that an earlier,
// now dead, process created for a control plane.
func removeStaleTempDirs() {
	matches, _ := filepath.Glob(filepath.Join(os.TempDir(), tempDirPrefix+"*"))
	for _, m := range matches {
		rest := strings.TrimPrefix(filepath.Base(m), tempDirPrefix)
		pidStr, _, ok := strings.Cut(rest, "-")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(pidStr)
		if err != nil || pid == os.Getpid() || processAlive(pid) {
			continue
		}
		_ = os.RemoveAll(m)
	}
}
