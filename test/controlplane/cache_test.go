package controlplane

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

func TestCacheDirUsesEnvironmentOverride(t *testing.T) {
	env := map[string]string{EnvDir: "/srv/cp"}
	got, err := cacheDir(func(k string) string { return env[k] }, func() (string, error) {
		t.Fatal("the user cache folder must not be consulted when the override is set")
		return "", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got != "/srv/cp" {
		t.Fatalf("cacheDir = %q, want /srv/cp", got)
	}
}

func TestCacheDirMakesRelativeOverrideAbsolute(t *testing.T) {
	got, err := cacheDir(func(string) string { return "rel/dir" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	wd, _ := os.Getwd()
	if want := filepath.Join(wd, "rel/dir"); got != want {
		t.Fatalf("cacheDir = %q, want %q", got, want)
	}
}

func TestCacheDirDefaultsToVersionedUserCacheFolder(t *testing.T) {
	got, err := cacheDir(func(string) string { return "" }, func() (string, error) { return "/home/u/.cache", nil })
	if err != nil {
		t.Fatal(err)
	}
	want := "/home/u/.cache/tether/controlplane/k8s-v1.37.2-etcd-v3.7.0"
	if got != want {
		t.Fatalf("cacheDir = %q, want %q", got, want)
	}
}

func TestCacheDirReportsMissingUserCacheFolder(t *testing.T) {
	boom := errors.New("no HOME")
	_, err := cacheDir(func(string) string { return "" }, func() (string, error) { return "", boom })
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), EnvDir) {
		t.Fatalf("err = %v, want it to wrap %v and mention %s", err, boom, EnvDir)
	}
}

func TestCacheDirPublicFunctionHonoursEnvironment(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(EnvDir, dir)
	got, err := CacheDir()
	if err != nil || got != dir {
		t.Fatalf("CacheDir() = %q, %v; want %q", got, err, dir)
	}
}

// fakeBinaries creates executable placeholder binaries in dir.
func fakeBinaries(t *testing.T, dir string) {
	t.Helper()
	for _, name := range []string{etcdName, apiserverName, kubectlName} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

func TestReadyNeedsStampAndBothBinaries(t *testing.T) {
	dir := t.TempDir()
	if controlPlaneSet.ready(dir) {
		t.Fatal("an empty folder is ready")
	}
	fakeBinaries(t, dir)
	if controlPlaneSet.ready(dir) {
		t.Fatal("binaries without a stamp are ready")
	}
	if err := controlPlaneSet.writeStamp(dir); err != nil {
		t.Fatal(err)
	}
	if !controlPlaneSet.ready(dir) {
		t.Fatal("binaries with a stamp are not ready")
	}
	if err := os.Remove(filepath.Join(dir, apiserverName)); err != nil {
		t.Fatal(err)
	}
	if controlPlaneSet.ready(dir) {
		t.Fatal("a stamp without kube-apiserver is ready")
	}
}

func TestReadyNeedsKubectl(t *testing.T) {
	dir := t.TempDir()
	fakeBinaries(t, dir)
	if err := controlPlaneSet.writeStamp(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, kubectlName)); err != nil {
		t.Fatal(err)
	}
	if controlPlaneSet.ready(dir) {
		t.Fatal("a cache without kubectl is ready")
	}
}

func TestStampForOtherVersionsIsRejected(t *testing.T) {
	dir := t.TempDir()
	fakeBinaries(t, dir)
	old := strings.ReplaceAll(string(controlPlaneSet.content()), KubernetesVersion, "v1.36.0")
	if err := os.WriteFile(filepath.Join(dir, stampName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if controlPlaneSet.stampOK(dir) || controlPlaneSet.ready(dir) {
		t.Fatal("a stamp for another Kubernetes version is accepted")
	}
}

func TestStampRecordsPinnedVersions(t *testing.T) {
	s := string(controlPlaneSet.content())
	for _, want := range []string{"kubernetes " + KubernetesVersion, "etcd " + EtcdVersion, "binaries etcd kube-apiserver kubectl"} {
		if !strings.Contains(s, want+"\n") {
			t.Errorf("stamp %q lacks line %q", s, want)
		}
	}
}

func TestEnsureReturnsCachedBinariesWithoutRunningGo(t *testing.T) {
	dir := t.TempDir()
	fakeBinaries(t, dir)
	if err := controlPlaneSet.writeStamp(dir); err != nil {
		t.Fatal(err)
	}
	// A go command that cannot run proves that nothing is built or checked.
	b, err := Ensure(context.Background(), EnsureOptions{Dir: dir, GoCommand: filepath.Join(dir, "no-such-go"), ToolsDir: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	if b.Etcd != filepath.Join(dir, "etcd") || b.KubeAPIServer != filepath.Join(dir, "kube-apiserver") ||
		b.Kubectl != filepath.Join(dir, "kubectl") || b.Dir != dir {
		t.Fatalf("Ensure = %+v", b)
	}
}

func TestApiserverLDFlagsSetVersion(t *testing.T) {
	want := "-X k8s.io/component-base/version.gitVersion=v1.37.2 -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=37"
	if got := apiserverLDFlags(); got != want {
		t.Fatalf("apiserverLDFlags = %q, want %q", got, want)
	}
}

func writeGoMod(t *testing.T, dir, module string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	content := "// a comment\nmodule " + module + " // trailing\n\ngo 1.26.0\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestFindRepoRootSkipsNestedModules(t *testing.T) {
	root := t.TempDir()
	writeGoMod(t, root, ModulePath)
	writeGoMod(t, filepath.Join(root, "test", "tools"), ModulePath+"/test/tools")
	deep := filepath.Join(root, "test", "tools", "a", "b")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := FindRepoRoot(deep)
	if err != nil {
		t.Fatal(err)
	}
	if got != root {
		t.Fatalf("FindRepoRoot = %q, want %q", got, root)
	}
}

func TestFindRepoRootAcceptsQuotedModulePath(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module \""+ModulePath+"\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := FindRepoRoot(root)
	if err != nil || got != root {
		t.Fatalf("FindRepoRoot = %q, %v; want %q", got, err, root)
	}
}

func TestFindRepoRootFailsOutsideTheRepository(t *testing.T) {
	dir := t.TempDir()
	writeGoMod(t, dir, "example.com/other")
	_, err := FindRepoRoot(dir)
	if !errors.Is(err, ErrNoRepoRoot) {
		t.Fatalf("err = %v, want ErrNoRepoRoot", err)
	}
}

func TestFindRepoRootFindsThisRepository(t *testing.T) {
	root, err := FindRepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "test", "tools", "go.mod")); err != nil {
		t.Fatalf("repository root %s has no test/tools/go.mod: %v", root, err)
	}
}

var dns1123Label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func TestNamespaceNameIsDNSLabel(t *testing.T) {
	cases := map[string]string{
		"TestWidget":                       "testwidget-abc123",
		"TestWidget/sub_test#01":           "testwidget-sub-test-01-abc123",
		"///":                              "test-abc123",
		strings.Repeat("TestLong", 20):     "",
		"Test__Trailing/":                  "test-trailing-abc123",
		"TestÜmlaut/with spaces and dots.": "test-mlaut-with-spaces-and-dots-abc123",
	}
	for in, want := range cases {
		got := namespaceName(in, "abc123")
		if !dns1123Label.MatchString(got) || len(got) > 63 {
			t.Errorf("namespaceName(%q) = %q, not a DNS-1123 label", in, got)
		}
		if want != "" && got != want {
			t.Errorf("namespaceName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRandomSuffixIsLowercaseAlphanumeric(t *testing.T) {
	s := randomSuffix(32)
	if len(s) != 32 || !regexp.MustCompile(`^[a-z0-9]+$`).MatchString(s) {
		t.Fatalf("randomSuffix = %q", s)
	}
}

func TestTailBufferKeepsLastBytes(t *testing.T) {
	b := newTailBuffer(5)
	_, _ = b.Write([]byte("hello "))
	_, _ = b.Write([]byte("world"))
	if got := b.String(); got != "world" {
		t.Fatalf("tail = %q, want world", got)
	}
}

// writeScript writes an executable shell script.
func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestEnsureStampsExistingBinariesThatReportPinnedVersions(t *testing.T) {
	dir := t.TempDir()
	writeScript(t, filepath.Join(dir, etcdName), "echo 'etcd Version: 3.7.0'\n")
	writeScript(t, filepath.Join(dir, apiserverName), "echo 'Kubernetes v1.37.2'\n")
	writeScript(t, filepath.Join(dir, kubectlName), "[ \"$*\" = 'version --client' ] && echo 'Client Version: v1.37.2'\n")
	_, err := Ensure(context.Background(), EnsureOptions{Dir: dir, GoCommand: filepath.Join(dir, "no-such-go"), ToolsDir: "/nonexistent"})
	if err != nil {
		t.Fatal(err)
	}
	if !controlPlaneSet.stampOK(dir) {
		t.Fatal("no stamp written for verified binaries")
	}
}

// fakeGo is a go command that "builds" a script printing the pinned version
// of the package it is asked for, and records the folder it ran in.
const fakeGo = `out=""; prev=""; pkg=""
for a in "$@"; do
  if [ "$prev" = "-o" ]; then out="$a"; fi
  prev="$a"; pkg="$a"
done
case "$pkg" in
  *etcd*) printf '#!/bin/sh\necho "etcd Version: 3.7.0"\n' > "$out" ;;
  *kubectl*) printf '#!/bin/sh\necho "Client Version: v1.37.2"\n' > "$out" ;;
  *containerd*) printf '#!/bin/sh\necho "containerd 2.2.9+unknown"\n' > "$out" ;;
  *coredns*) printf '#!/bin/sh\necho "CoreDNS-1.15.0"\n' > "$out" ;;
  *helm*) printf '#!/bin/sh\necho "v4.3.1"\n' > "$out" ;;
  *jaeger*) printf '#!/bin/sh\necho {\\"gitVersion\\":\\"v1.75.0\\"}\n' > "$out" ;;
  *) printf '#!/bin/sh\necho "Kubernetes v1.37.2"\n' > "$out" ;;
esac
chmod +x "$out"
echo "$PWD $pkg${CGO_ENABLED:+ CGO_ENABLED=$CGO_ENABLED}" >> "$FAKE_GO_LOG"
`

func TestEnsureBuildsWrongBinariesInToolsDir(t *testing.T) {
	dir, tools, bin := t.TempDir(), t.TempDir(), t.TempDir()
	goCmd := filepath.Join(bin, "go")
	writeScript(t, goCmd, fakeGo)
	logPath := filepath.Join(bin, "log")
	t.Setenv("FAKE_GO_LOG", logPath)
	// etcd is right already; kube-apiserver reports the unpatched version.
	writeScript(t, filepath.Join(dir, etcdName), "echo 'etcd Version: 3.7.0'\n")
	writeScript(t, filepath.Join(dir, apiserverName), "echo 'Kubernetes v0.0.0-master'\n")
	writeScript(t, filepath.Join(dir, kubectlName), "echo 'Client Version: v1.37.2'\n")

	var progress strings.Builder
	b, err := Ensure(context.Background(), EnsureOptions{Dir: dir, ToolsDir: tools, GoCommand: goCmd, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if !controlPlaneSet.ready(dir) {
		t.Fatal("cache not ready after a build")
	}
	if err := checkVersion(context.Background(), b.KubeAPIServer, "Kubernetes v1.37.2"); err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(logPath)
	if want := tools + " k8s.io/kubernetes/cmd/kube-apiserver\n"; string(log) != want {
		t.Fatalf("go ran as %q, want only %q", log, want)
	}
	for _, want := range []string{"building kube-apiserver v1.37.2", "about 10 minutes", "built kube-apiserver"} {
		if !strings.Contains(progress.String(), want) {
			t.Errorf("progress %q lacks %q", progress.String(), want)
		}
	}
	leftovers, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	if len(leftovers) != 0 {
		t.Errorf("temporary files left: %v", leftovers)
	}
}

func TestEnsureReportsFailedBuild(t *testing.T) {
	dir, bin := t.TempDir(), t.TempDir()
	goCmd := filepath.Join(bin, "go")
	writeScript(t, goCmd, "echo 'cannot compile today' >&2\nexit 1\n")
	_, err := Ensure(context.Background(), EnsureOptions{Dir: dir, ToolsDir: bin, GoCommand: goCmd})
	if err == nil || !strings.Contains(err.Error(), "cannot compile today") || !strings.Contains(err.Error(), "building etcd") {
		t.Fatalf("err = %v, want the build output and what was built", err)
	}
	if controlPlaneSet.stampOK(dir) {
		t.Fatal("stamp written after a failed build")
	}
}

// TestEnsureOnACacheFromBeforeKubectlBuildsOnlyKubectl is the upgrade of a
// cache stamped when it held etcd and kube-apiserver only.
func TestEnsureOnACacheFromBeforeKubectlBuildsOnlyKubectl(t *testing.T) {
	dir, tools, bin := t.TempDir(), t.TempDir(), t.TempDir()
	goCmd := filepath.Join(bin, "go")
	writeScript(t, goCmd, fakeGo)
	logPath := filepath.Join(bin, "log")
	t.Setenv("FAKE_GO_LOG", logPath)
	writeScript(t, filepath.Join(dir, etcdName), "echo 'etcd Version: 3.7.0'\n")
	writeScript(t, filepath.Join(dir, apiserverName), "echo 'Kubernetes v1.37.2'\n")
	old := "# written by " + ModulePath + "/test/controlplane after a verified build\n" +
		"kubernetes " + KubernetesVersion + "\n" + "etcd " + EtcdVersion + "\n"
	if err := os.WriteFile(filepath.Join(dir, stampName), []byte(old), 0o644); err != nil {
		t.Fatal(err)
	}
	if controlPlaneSet.stampOK(dir) {
		t.Fatal("the stamp of a cache without kubectl is accepted")
	}

	var progress strings.Builder
	b, err := Ensure(context.Background(), EnsureOptions{Dir: dir, ToolsDir: tools, GoCommand: goCmd, Progress: &progress})
	if err != nil {
		t.Fatal(err)
	}
	if !controlPlaneSet.ready(dir) {
		t.Fatal("cache not ready after building kubectl")
	}
	if err := checkVersion(context.Background(), b.Kubectl, "Client Version: v1.37.2", "version", "--client"); err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(logPath)
	if want := tools + " k8s.io/kubernetes/cmd/kubectl\n"; string(log) != want {
		t.Fatalf("go ran as %q, want only %q", log, want)
	}
	if !strings.Contains(progress.String(), "building kubectl v1.37.2") {
		t.Errorf("progress %q does not say kubectl is built", progress.String())
	}
}

func TestCheckVersionRunsTheGivenArguments(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tool")
	writeScript(t, path, "echo \"args: $*\"\n")
	if err := checkVersion(context.Background(), path, "args: --version"); err != nil {
		t.Errorf("default arguments: %v", err)
	}
	if err := checkVersion(context.Background(), path, "args: version --client", "version", "--client"); err != nil {
		t.Errorf("given arguments: %v", err)
	}
	err := checkVersion(context.Background(), path, "Client Version: v1.37.2", "version", "--client")
	if err == nil || !strings.Contains(err.Error(), "version --client") {
		t.Errorf("err = %v, want a mismatch that names the command", err)
	}
}

// TestEnsureNodeBuildsEachBinaryInItsModule: the Kubernetes components in
// test/tools, containerd static in its own module, CoreDNS in its own; the
// node's stamp leaves the control plane's alone.
func TestEnsureNodeBuildsEachBinaryInItsModule(t *testing.T) {
	dir, tools, goCmd, logPath := fakeModuleBuild(t, "containerd", "coredns")
	b, err := EnsureNode(context.Background(), EnsureOptions{Dir: dir, ToolsDir: tools, GoCommand: goCmd})
	if err != nil {
		t.Fatal(err)
	}
	if !nodeSet.ready(dir) || controlPlaneSet.stampOK(dir) {
		t.Fatal("want the node's stamp written and the control plane's not")
	}
	log, _ := os.ReadFile(logPath)
	want := strings.Join([]string{
		tools + " k8s.io/kubernetes/cmd/kubelet",
		tools + " k8s.io/kubernetes/cmd/kube-controller-manager",
		tools + " k8s.io/kubernetes/cmd/kube-scheduler",
		tools + " k8s.io/kubernetes/cmd/kube-proxy",
		tools + "/containerd github.com/containerd/containerd/v2/cmd/containerd CGO_ENABLED=0",
		tools + "/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 CGO_ENABLED=0",
		tools + "/containerd github.com/containerd/containerd/v2/cmd/ctr CGO_ENABLED=0",
		tools + "/coredns github.com/coredns/coredns",
	}, "\n") + "\n"
	if string(log) != want {
		t.Fatalf("go ran as\n%s\nwant\n%s", log, want)
	}
	if err := checkVersion(context.Background(), b.CoreDNS, "CoreDNS-1.15.0", "-version"); err != nil {
		t.Fatal(err)
	}
}

// TestEnsureHelmBuildsInItsModule: helm is built in test/tools/helm, and its
// stamp leaves the control plane's and the node's alone.
func TestEnsureHelmBuildsInItsModule(t *testing.T) {
	dir, tools, goCmd, logPath := fakeModuleBuild(t, "helm")
	path, err := EnsureHelm(context.Background(), EnsureOptions{Dir: dir, ToolsDir: tools, GoCommand: goCmd})
	if err != nil {
		t.Fatal(err)
	}
	if !helmSet.ready(dir) || controlPlaneSet.stampOK(dir) || nodeSet.stampOK(dir) {
		t.Fatal("want helm's stamp written and the others not")
	}
	log, _ := os.ReadFile(logPath)
	if want := tools + "/helm helm.sh/helm/v4/cmd/helm\n"; string(log) != want {
		t.Fatalf("go ran as %q, want %q", log, want)
	}
	if err := checkVersion(context.Background(), path, HelmVersion, "version", "--short"); err != nil {
		t.Fatal(err)
	}
}

// TestEnsureJaegerBuildsInItsModule: jaeger is built in test/tools/jaeger,
// and its stamp leaves the others alone.
func TestEnsureJaegerBuildsInItsModule(t *testing.T) {
	dir, tools, goCmd, logPath := fakeModuleBuild(t, "jaeger")
	path, err := EnsureJaeger(context.Background(), EnsureOptions{Dir: dir, ToolsDir: tools, GoCommand: goCmd})
	if err != nil {
		t.Fatal(err)
	}
	if !jaegerSet.ready(dir) || controlPlaneSet.stampOK(dir) || helmSet.stampOK(dir) {
		t.Fatal("want jaeger's stamp written and the others not")
	}
	log, _ := os.ReadFile(logPath)
	if want := tools + "/jaeger github.com/jaegertracing/jaeger/cmd/jaeger\n"; string(log) != want {
		t.Fatalf("go ran as %q, want %q", log, want)
	}
	if err := checkVersion(context.Background(), path, `"gitVersion":"v1.75.0"`, "version"); err != nil {
		t.Fatal(err)
	}
}

// fakeModuleBuild makes a cache folder, a tools folder with a folder for
// each of modules, and a fake go (fakeGo) that records its builds in the
// file at logPath.
func fakeModuleBuild(t *testing.T, modules ...string) (dir, tools, goCmd, logPath string) {
	t.Helper()
	dir, tools, bin := t.TempDir(), t.TempDir(), t.TempDir()
	goCmd = filepath.Join(bin, "go")
	writeScript(t, goCmd, fakeGo)
	logPath = filepath.Join(bin, "log")
	t.Setenv("FAKE_GO_LOG", logPath)
	t.Setenv("CGO_ENABLED", "")
	for _, m := range modules {
		if err := os.Mkdir(filepath.Join(tools, m), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, tools, goCmd, logPath
}
