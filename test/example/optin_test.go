package example

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/clientcmd"
)

// TestHandlerWorksWhereNamespacesOptIn runs the example handler as a
// ServiceAccount granted as deploy/example-handler grants it: namespaces
// and webhook configurations cluster-wide, Secrets and ConfigMaps only in
// the namespaces that opt in by a RoleBinding. A source in an opted-in
// namespace is copied into another that opted in, not into one that has
// not, nor into kube-system, even when kube-system binds the role; a
// namespace that opts in later is copied into once the handler looks again
// (--grant-interval).
func TestHandlerWorksWhereNamespacesOptIn(t *testing.T) {
	e := startBroker(t)
	ctx := context.Background()
	other, late := e.cp.Namespace(t), e.cp.Namespace(t)
	identity := e.cp.Namespace(t)
	suffix := randomSuffix()
	everywhere := clusterRole(t, e, "ex-everywhere-"+suffix,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}},
		rbacv1.PolicyRule{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"validatingwebhookconfigurations"}, Verbs: []string{"create"}})
	objects := clusterRole(t, e, "ex-objects-"+suffix,
		rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets", "configmaps"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}})
	sa := rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "example-handler", Namespace: identity}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: everywhere},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: everywhere}, Subjects: []rbacv1.Subject{sa}}
	if _, err := e.cp.Client().RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cp.Client().RbacV1().ClusterRoleBindings().Delete(context.Background(), everywhere, metav1.DeleteOptions{})
	})
	optIn := func(ns string) {
		t.Helper()
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: objects, Namespace: ns},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: objects}, Subjects: []rbacv1.Subject{sa}}
		if _, err := e.cp.Client().RbacV1().RoleBindings(ns).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = e.cp.Client().RbacV1().RoleBindings(ns).Delete(context.Background(), objects, metav1.DeleteOptions{})
		})
	}
	for _, ns := range []string{e.ns, other, "kube-system"} {
		optIn(ns)
	}
	e.startHandler(t, "--kubeconfig", serviceAccountKubeconfig(t, e, identity, sa.Name), "--grant-interval", "1s", "--ttl-webhook=false")

	// The handler's own identity never reads kube-system, so the test
	// looks there as the admin.
	e.create(t, secretsGVR, object(secretsGVR, e.ns, "db", enabled(other+","+late+",kube-system", ""), map[string]string{"password": "s3cret"}))
	e.waitFor(t, secretsGVR, other, "db", "copied into a namespace that opted in", func(o *unstructured.Unstructured) bool { return o != nil })
	for _, ns := range []string{late, "kube-system"} {
		if e.get(t, secretsGVR, ns, "db") != nil {
			t.Errorf("a copy in %s, which %s", ns, map[string]string{late: "has not opted in", "kube-system": "is never a target"}[ns])
		}
	}

	begin := time.Now()
	optIn(late)
	e.waitFor(t, secretsGVR, late, "db", "copied once the namespace opted in", func(o *unstructured.Unstructured) bool { return o != nil })
	t.Logf("copied into a namespace %s after it opted in", time.Since(begin).Round(100*time.Millisecond))
	if e.get(t, secretsGVR, "kube-system", "db") != nil {
		t.Error("a copy in kube-system")
	}
}

// clusterRole creates a ClusterRole until the test ends and returns its name.
func clusterRole(t *testing.T, e *env, name string, rules ...rbacv1.PolicyRule) string {
	t.Helper()
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
	if _, err := e.cp.Client().RbacV1().ClusterRoles().Create(context.Background(), role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.cp.Client().RbacV1().ClusterRoles().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	return name
}

// serviceAccountKubeconfig writes a kubeconfig for the control plane that
// authenticates as the ServiceAccount ns/name, and nothing of the admin's.
func serviceAccountKubeconfig(t *testing.T, e *env, ns, name string) string {
	t.Helper()
	token, err := e.cp.ServiceAccountToken(context.Background(), ns, name)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(e.cp.KubeconfigPath())
	if err != nil {
		t.Fatal(err)
	}
	for _, auth := range cfg.AuthInfos {
		auth.Token, auth.TokenFile, auth.ClientCertificate, auth.ClientCertificateData = token, "", "", nil
		auth.ClientKey, auth.ClientKeyData, auth.Username, auth.Password = "", nil, "", ""
		auth.Impersonate, auth.ImpersonateGroups = "", nil
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
