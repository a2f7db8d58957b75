package controlplane

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// Pinned versions. They must match test/tools/go.mod; the cache folder is named
// after them so a new pin never reuses old binaries.
const (
	KubernetesVersion = "v1.37.2"
	EtcdVersion       = "v3.7.0"
)

const (
	// EnvDir overrides the binary cache folder returned by [CacheDir].
	EnvDir = "TETHER_CONTROLPLANE_DIR"

	// ModulePath is the module line of the repository's root go.mod, used to
	// find the repository root (and test/tools in it).
	ModulePath = "github.com/tether-dev/tether"

	etcdName      = "etcd"
	apiserverName = "kube-apiserver"
	kubectlName   = "kubectl"
	stampName     = "stamp"
	lockName      = ".lock"
)

// Binaries locates a built etcd, kube-apiserver and kubectl.
type Binaries struct {
	Dir           string // folder holding the binaries
	Etcd          string // path of the etcd binary
	KubeAPIServer string // path of the kube-apiserver binary
	// Kubectl is the path of a kubectl of the same Kubernetes version, for
	// tests that apply manifests. [Start] does not need it.
	Kubectl string
}

// IsZero reports whether b names no control-plane binaries (etcd and
// kube-apiserver; Kubectl does not count).
func (b Binaries) IsZero() bool { return b.Etcd == "" && b.KubeAPIServer == "" }

// binariesIn returns the paths the binaries have inside dir.
func binariesIn(dir string) Binaries {
	return Binaries{
		Dir:           dir,
		Etcd:          filepath.Join(dir, etcdName),
		KubeAPIServer: filepath.Join(dir, apiserverName),
		Kubectl:       filepath.Join(dir, kubectlName),
	}
}

// cacheSubdir is the folder name under the user cache, one per pinned pair.
func cacheSubdir() string {
	return "k8s-" + KubernetesVersion + "-etcd-" + EtcdVersion
}

// CacheDir returns the folder the binaries are cached in: the value of
// TETHER_CONTROLPLANE_DIR when set, else
// <os.UserCacheDir()>/tether/controlplane/k8s-<version>-etcd-<version>.
func CacheDir() (string, error) {
	return cacheDir(os.Getenv, os.UserCacheDir)
}

// cacheDir is CacheDir with its environment injected, for tests.
func cacheDir(getenv func(string) string, userCacheDir func() (string, error)) (string, error) {
	if d := getenv(EnvDir); d != "" {
		abs, err := filepath.Abs(d)
		if err != nil {
			return "", fmt.Errorf("resolving %s=%q: %w", EnvDir, d, err)
		}
		return abs, nil
	}
	base, err := userCacheDir()
	if err != nil {
		return "", fmt.Errorf("finding the user cache folder (set %s to choose one): %w", EnvDir, err)
	}
	return filepath.Join(base, "tether", "controlplane", cacheSubdir()), nil
}

// target is one binary a [binarySet] builds.
type target struct {
	name        string   // the file's name in the cache folder
	version     string   // the pinned version, for progress messages
	pkg         string   // the main package to build
	module      string   // the folder of its module under test/tools; "" is test/tools
	tags        string   // build tags, comma separated
	ldflags     string   // -ldflags
	env         []string // added to the build's environment
	want        string   // what its version command prints
	versionArgs []string // the version command's arguments; nil: --version
	hint        string   // how long a first build takes, for progress messages
}

// binarySet is a group of binaries that one stamp file vouches for.
type binarySet struct {
	stamp    string   // the stamp file's name in the cache folder
	versions []string // "component version" lines the stamp records
	targets  []target // built in this order
}

// controlPlaneSet is what [Ensure] builds.
var controlPlaneSet = binarySet{
	stamp:    stampName,
	versions: []string{"kubernetes " + KubernetesVersion, "etcd " + EtcdVersion},
	targets: []target{
		{name: etcdName, version: EtcdVersion, pkg: "go.etcd.io/etcd/server/v3",
			want: "etcd Version: " + strings.TrimPrefix(EtcdVersion, "v"), hint: "about 30 seconds"},
		{name: apiserverName, version: KubernetesVersion, pkg: "k8s.io/kubernetes/cmd/kube-apiserver", ldflags: apiserverLDFlags(),
			want: "Kubernetes " + KubernetesVersion, hint: "about 10 minutes on 2 cores"},
		// kubectl reads the same version variables as kube-apiserver.
		{name: kubectlName, version: KubernetesVersion, pkg: "k8s.io/kubernetes/cmd/kubectl", ldflags: apiserverLDFlags(),
			want: "Client Version: " + KubernetesVersion, versionArgs: []string{"version", "--client"},
			hint: "a minute or two after kube-apiserver, whose packages it shares"},
	},
}

// content is what the set's stamp file holds after a verified build. The
// binaries line names every binary the stamp vouches for: a cache stamped
// before kubectl was added does not match, so Ensure checks the binaries that
// are there and builds only the missing kubectl.
func (s binarySet) content() []byte {
	names := make([]string, len(s.targets))
	for i, t := range s.targets {
		names[i] = t.name
	}
	return []byte("# written by " + ModulePath + "/test/controlplane after a verified build\n" +
		strings.Join(s.versions, "\n") + "\n" +
		"binaries " + strings.Join(names, " ") + "\n")
}

// stampOK reports whether dir holds the set's stamp for the pinned versions.
func (s binarySet) stampOK(dir string) bool {
	got, err := os.ReadFile(filepath.Join(dir, s.stamp))
	return err == nil && bytes.Equal(got, s.content())
}

// writeStamp records in dir that the set's binaries there are the pinned
// versions.
func (s binarySet) writeStamp(dir string) error {
	tmp := filepath.Join(dir, fmt.Sprintf(".%s.tmp-%d", s.stamp, os.Getpid()))
	if err := os.WriteFile(tmp, s.content(), 0o644); err != nil {
		return fmt.Errorf("writing the stamp file: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, s.stamp)); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("renaming the stamp file into place: %w", err)
	}
	return nil
}

// ready reports whether dir holds every binary of the set and a matching
// stamp, which is all Ensure needs to return at once.
func (s binarySet) ready(dir string) bool {
	if !s.stampOK(dir) {
		return false
	}
	for _, t := range s.targets {
		if !isExecutable(filepath.Join(dir, t.name)) {
			return false
		}
	}
	return true
}

// isExecutable reports whether path is a regular file with an execute bit.
func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// ErrNoRepoRoot is returned by FindRepoRoot when no parent folder holds the
// repository's go.mod.
var ErrNoRepoRoot = errors.New("no go.mod with module " + ModulePath + " in this folder or any parent")

// FindRepoRoot walks up from start to the folder whose go.mod declares module
// github.com/tether-dev/tether (nested modules such as test/tools are skipped).
func FindRepoRoot(start string) (string, error) {
	dir, err := filepath.Abs(start)
	if err != nil {
		return "", fmt.Errorf("resolving %q: %w", start, err)
	}
	for {
		mod, err := modulePath(filepath.Join(dir, "go.mod"))
		switch {
		case err == nil && mod == ModulePath:
			return dir, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("looking for the repository root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("walking up from %s: %w", start, ErrNoRepoRoot)
		}
		dir = parent
	}
}

// modulePath returns the module path declared in the go.mod at path.
func modulePath(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if i := strings.Index(line, "//"); i >= 0 {
			line = strings.TrimSpace(line[:i])
		}
		rest, ok := strings.CutPrefix(line, "module")
		if !ok || (rest != "" && rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		return strings.Trim(strings.TrimSpace(rest), `"`+"`"), nil
	}
	return "", nil
}
