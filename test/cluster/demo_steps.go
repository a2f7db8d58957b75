package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/test/example"
)

// The demo's objects.
const (
	sourceNS   = "demo-a"
	sourceName = "db-credentials"
	heldName   = "api-token"
	graceName  = "cache-key"
	ttlName    = "session-token"
	hold       = example.HoldPrefix + handlerName
	// brokerNS is the broker's namespace, where its presence Leases live.
	brokerNS = "tether-system"
	// grace is how long the demo's broker waits for an absent handler
	// before it releases the objects being deleted that the handler holds.
	grace = 10 * time.Second
	// annInstances on a handler's presence Lease counts its connected
	// instances (written by broker/presence).
	annInstances = "tether.dev/instances"
)

// targets and excluded are the namespaces the demo's sources name.
var (
	targets  = []string{"demo-b", "demo-c"}
	excluded = "demo-d"
)

func (d *demo) createNamespaces(ctx context.Context, names ...string) error {
	for _, n := range names {
		_, err := d.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", n, err)
		}
	}
	d.say("demo: namespaces %s exist", strings.Join(names, ", "))
	return nil
}

// connected: the handler's presence Lease counts one instance.
func (d *demo) connected(ctx context.Context) error {
	d.next("The example handler connects to the broker and declares its bindings.")
	if err := d.waitInstances(ctx, 1); err != nil {
		return err
	}
	d.say("    Lease %s/%s: %s=1 (the broker records every handler's presence)", brokerNS, presence.LeaseName(handlerName), annInstances)
	return nil
}

// waitInstances waits until the handler's presence Lease counts n
// connected instances.
func (d *demo) waitInstances(ctx context.Context, n int) error {
	what := fmt.Sprintf("the Lease %s/%s to count %d connected instance(s)", brokerNS, presence.LeaseName(handlerName), n)
	return d.waitFor(ctx, what, func(ctx context.Context) (bool, error) {
		l, err := d.kube.CoordinationV1().Leases(brokerNS).Get(ctx, presence.LeaseName(handlerName), metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return l.Annotations[annInstances] == strconv.Itoa(n), nil
	})
}

// replicate: a source in demo-a is copied to demo-b and demo-c, not to the
// excluded demo-d, and carries the hold.
func (d *demo) replicate(ctx context.Context) error {
	include := strings.Join(append(slices.Clone(targets), excluded), ",")
	d.next("Create Secret %s/%s with %s=true, %s=%s, %s=%s.", sourceNS, sourceName,
		example.AnnEnabled, example.AnnInclude, include, example.AnnExclude, excluded)
	if err := d.createSecret(ctx, sourceNS, sourceName, map[string]string{
		example.AnnEnabled: "true", example.AnnInclude: include, example.AnnExclude: excluded,
	}, "password", "hunter2"); err != nil {
		return err
	}

	d.next("Copies appear in %s but not in the excluded %s.", strings.Join(targets, " and "), excluded)
	if err := d.waitCopies(ctx, sourceName, "hunter2"); err != nil {
		return err
	}
	copies, err := d.copiesOf(ctx, sourceNS+"/"+sourceName)
	if err != nil {
		return err
	}
	for _, c := range copies {
		d.say("    %s/%s: label %s=%s, annotations %s", c.Namespace, c.Name, example.LabelCopy, c.Labels[example.LabelCopy], annotationList(c.Annotations))
	}
	if _, err := d.kube.CoreV1().Secrets(excluded).Get(ctx, sourceName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		return fmt.Errorf("%s/%s: want no copy in the excluded namespace, got %v", excluded, sourceName, err)
	}
	d.say("    copies of %s/%s in the cluster: %s; none in %s", sourceNS, sourceName, namespacesOf(copies), excluded)

	d.next("The source carries the hold %s.", hold)
	var fin []string
	if err := d.waitFor(ctx, "the hold on "+sourceNS+"/"+sourceName, func(ctx context.Context) (bool, error) {
		s, err := d.kube.CoreV1().Secrets(sourceNS).Get(ctx, sourceName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		fin = s.Finalizers
		return slices.Contains(fin, hold), nil
	}); err != nil {
		return err
	}
	d.say("    finalizers of %s/%s: %v", sourceNS, sourceName, fin)
	return nil
}

// update: a new password in the source reaches the copies.
func (d *demo) update(ctx context.Context) error {
	d.next("Update the source's password; the copies follow.")
	patch := fmt.Sprintf(`{"stringData":{"password":%q}}`, "correct-horse")
	if _, err := d.kube.CoreV1().Secrets(sourceNS).Patch(ctx, sourceName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("updating %s/%s: %w", sourceNS, sourceName, err)
	}
	if err := d.waitCopies(ctx, sourceName, "correct-horse"); err != nil {
		return err
	}
	d.say("    %s carry password=correct-horse", strings.Join(qualified(targets, sourceName), " and "))
	return nil
}

// ttl: a Secret with a 3s ttl is deleted, and never carries a finalizer.
func (d *demo) ttl(ctx context.Context) error {
	d.next("Create Secret %s/%s with %s=3s; the TTL reaper deletes it, and never holds it.", sourceNS, ttlName, example.AnnTTL)
	wctx, cancel := context.WithTimeout(ctx, d.wait)
	defer cancel()
	w, err := d.kube.CoreV1().Secrets(sourceNS).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ttlName})
	if err != nil {
		return err
	}
	defer w.Stop()
	t0 := time.Now()
	if err := d.createSecret(ctx, sourceNS, ttlName, map[string]string{example.AnnTTL: "3s"}, "token", "abc"); err != nil {
		return err
	}
	fmt.Fprintf(d.out, "    waiting up to %s for the watch to report %s/%s deleted ... ", d.wait, sourceNS, ttlName)
	versions := 0
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				fmt.Fprintln(d.out, "no")
				return fmt.Errorf("the watch of %s/%s ended before it was deleted (%v)", sourceNS, ttlName, wctx.Err())
			}
			s, isSecret := ev.Object.(*corev1.Secret)
			if !isSecret {
				fmt.Fprintln(d.out, "no")
				return fmt.Errorf("watching %s/%s: %v", sourceNS, ttlName, ev.Object)
			}
			versions++
			if len(s.Finalizers) > 0 {
				fmt.Fprintln(d.out, "no")
				return fmt.Errorf("%s/%s carries finalizers %v", sourceNS, ttlName, s.Finalizers)
			}
			if ev.Type == watch.Deleted {
				fmt.Fprintf(d.out, "ok after %s\n", since(t0))
				d.say("    reaped %s after creation; no finalizer in any of the %d versions watched", since(t0), versions)
				return nil
			}
		case <-wctx.Done():
			fmt.Fprintln(d.out, "no")
			return fmt.Errorf("%s/%s was not reaped: %w", sourceNS, ttlName, wctx.Err())
		}
	}
}

// deleteSource: deleting the source removes the copies, then the hold.
func (d *demo) deleteSource(ctx context.Context) error {
	d.next("Delete the source: its delete handler removes the copies, the hold is released, the source is gone.")
	if err := d.kube.CoreV1().Secrets(sourceNS).Delete(ctx, sourceName, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := d.waitGone(ctx, sourceName); err != nil {
		return err
	}
	d.say("    no copy of %s/%s left; the source is gone, so its hold was released", sourceNS, sourceName)
	return nil
}

// handlerAbsent: a held source deleted while the handler is down stays
// while the handler is within its grace, and is cleaned up by the handler
// when it returns in time; past the grace the broker lets the object go.
func (d *demo) handlerAbsent(ctx context.Context) error {
	d.next("Create Secrets %s/%s and %s/%s, replicated to %s; wait for their copies and holds.",
		sourceNS, heldName, sourceNS, graceName, targets[0])
	for _, name := range []string{heldName, graceName} {
		if err := d.createSecret(ctx, sourceNS, name, map[string]string{
			example.AnnEnabled: "true", example.AnnInclude: targets[0],
		}, "token", "t0k3n"); err != nil {
			return err
		}
		if err := d.waitHeldCopy(ctx, name); err != nil {
			return err
		}
	}

	d.next("Kill the handler with SIGKILL and delete %s/%s while it is gone.", sourceNS, heldName)
	if err := d.killHandler(ctx); err != nil {
		return err
	}
	if err := d.kube.CoreV1().Secrets(sourceNS).Delete(ctx, heldName, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := d.staysTerminating(ctx, heldName); err != nil {
		return err
	}

	d.next("Start the handler again within its grace: its delete handler runs, the copy goes, the hold is released.")
	if err := d.startHandler(); err != nil {
		return err
	}
	if err := d.waitInstances(ctx, 1); err != nil {
		return err
	}
	if err := d.waitGone(ctx, heldName); err != nil {
		return err
	}
	d.say("    no copy of %s/%s left and the source is gone: the returning handler cleaned up", sourceNS, heldName)

	d.next("Kill the handler again, delete %s/%s and leave the handler away past its %s grace.", sourceNS, graceName, grace)
	killed := time.Now()
	if err := d.killHandler(ctx); err != nil {
		return err
	}
	if err := d.kube.CoreV1().Secrets(sourceNS).Delete(ctx, graceName, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := d.waitFor(ctx, fmt.Sprintf("the broker to release %s/%s after the grace", sourceNS, graceName), func(ctx context.Context) (bool, error) {
		_, err := d.kube.CoreV1().Secrets(sourceNS).Get(ctx, graceName, metav1.GetOptions{})
		return apierrors.IsNotFound(err), ignoreNotFound(err)
	}); err != nil {
		return err
	}
	d.say("    %s/%s is gone %s after the handler died, with no handler running", sourceNS, graceName, since(killed))
	// The broker's recorder posts the Event after the release, so it may
	// come a moment after the Secret has gone.
	var events *corev1.EventList
	if err := d.waitFor(ctx, fmt.Sprintf("a HoldReleased Event about %s/%s", sourceNS, graceName), func(ctx context.Context) (bool, error) {
		var err error
		events, err = d.kube.CoreV1().Events(sourceNS).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + graceName + ",reason=HoldReleased"})
		return err == nil && len(events.Items) > 0, err
	}); err != nil {
		return err
	}
	d.say("    Event %s: %s", events.Items[0].Reason, events.Items[0].Message)
	copies, err := d.copiesOf(ctx, sourceNS+"/"+graceName)
	if err != nil {
		return err
	}
	d.say("    copies of %s/%s left behind: %s. Its delete handler never ran: with the default policy", sourceNS, graceName, orNone(namespacesOf(copies)))
	d.say("    (HOLD) an absent handler cannot block deletion; Finalizer(FinalizerStrict) would wait for it.")
	return nil
}

// waitHeldCopy waits for the source's one copy and its hold.
func (d *demo) waitHeldCopy(ctx context.Context, name string) error {
	return d.waitFor(ctx, fmt.Sprintf("a copy of %s/%s and its hold", sourceNS, name), func(ctx context.Context) (bool, error) {
		copies, err := d.copiesOf(ctx, sourceNS+"/"+name)
		if err != nil || len(copies) != 1 {
			return false, err
		}
		s, err := d.kube.CoreV1().Secrets(sourceNS).Get(ctx, name, metav1.GetOptions{})
		return err == nil && slices.Contains(s.Finalizers, hold), err
	})
}

// killHandler kills the handler with SIGKILL and waits until its Lease
// counts no instance.
func (d *demo) killHandler(ctx context.Context) error {
	d.handler.Kill()
	d.say("    killed the example handler (pid %d) with SIGKILL", d.handler.Pid())
	return d.waitInstances(ctx, 0)
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// staysTerminating watches a held source for absentFor after its
// deletion: it must stay, Terminating with the hold, since the handler is
// absent but within its grace.
func (d *demo) staysTerminating(ctx context.Context, name string) error {
	fmt.Fprintf(d.out, "    watching %s/%s for %s with the handler gone ... ", sourceNS, name, d.absentFor)
	deadline := time.Now().Add(d.absentFor)
	var s *corev1.Secret
	for {
		var err error
		s, err = d.kube.CoreV1().Secrets(sourceNS).Get(ctx, name, metav1.GetOptions{})
		if err == nil && (s.DeletionTimestamp == nil || !slices.Contains(s.Finalizers, hold)) {
			err = fmt.Errorf("want it Terminating with the hold, got deletionTimestamp %v, finalizers %v", s.DeletionTimestamp, s.Finalizers)
		}
		if err != nil {
			fmt.Fprintln(d.out, "no")
			return fmt.Errorf("%s/%s: %w", sourceNS, name, err)
		}
		if !time.Now().Before(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			fmt.Fprintln(d.out, "no")
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	fmt.Fprintln(d.out, "still there")
	d.say("    %s/%s stays Terminating (finalizers %v): its handler is absent, but within its %s grace",
		sourceNS, name, s.Finalizers, grace)
	return nil
}

func (d *demo) createSecret(ctx context.Context, ns, name string, annotations map[string]string, key, value string) error {
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Annotations: annotations},
		Data:       map[string][]byte{key: []byte(value)},
	}
	if _, err := d.kube.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating Secret %s/%s: %w", ns, name, err)
	}
	return nil
}

// waitCopies waits until the source's copies in the targets carry
// password=value and name their source.
func (d *demo) waitCopies(ctx context.Context, name, value string) error {
	what := fmt.Sprintf("copies with password=%s in %s", value, strings.Join(targets, " and "))
	return d.waitFor(ctx, what, func(ctx context.Context) (bool, error) {
		for _, ns := range targets {
			s, err := d.kube.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false, nil
			}
			if err != nil {
				return false, err
			}
			if s.Annotations[example.AnnSource] != sourceNS+"/"+name || string(s.Data["password"]) != value {
				return false, nil
			}
		}
		return true, nil
	})
}

// waitGone waits until the source has no copy left and is gone itself.
func (d *demo) waitGone(ctx context.Context, name string) error {
	key := sourceNS + "/" + name
	if err := d.waitFor(ctx, "no copy of "+key+" in any namespace", func(ctx context.Context) (bool, error) {
		copies, err := d.copiesOf(ctx, key)
		return len(copies) == 0, err
	}); err != nil {
		return err
	}
	return d.waitFor(ctx, key+" to be gone", func(ctx context.Context) (bool, error) {
		_, err := d.kube.CoreV1().Secrets(sourceNS).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// copiesOf lists the copies of the source key in every namespace.
func (d *demo) copiesOf(ctx context.Context, key string) ([]corev1.Secret, error) {
	list, err := d.kube.CoreV1().Secrets("").List(ctx, metav1.ListOptions{LabelSelector: example.LabelCopy + "=true"})
	if err != nil {
		return nil, err
	}
	var out []corev1.Secret
	for _, s := range list.Items {
		if s.Annotations[example.AnnSource] == key {
			out = append(out, s)
		}
	}
	return out, nil
}

func namespacesOf(secrets []corev1.Secret) string {
	var ns []string
	for _, s := range secrets {
		ns = append(ns, s.Namespace)
	}
	slices.Sort(ns)
	return strings.Join(ns, ", ")
}

func qualified(namespaces []string, name string) []string {
	var out []string
	for _, ns := range namespaces {
		out = append(out, ns+"/"+name)
	}
	return out
}

// annotationList renders annotations as sorted k=v pairs.
func annotationList(m map[string]string) string {
	var out []string
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return "[" + strings.Join(out, " ") + "]"
}
