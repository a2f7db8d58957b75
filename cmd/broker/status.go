package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/release"
	"github.com/tether-dev/tether/broker/webhook"
	"github.com/tether-dev/tether/sdk/kubeconfig"
)

// clients builds what status and release need from the common flags.
func clients(path string) (dynamic.Interface, kube.Interface, error) {
	cfg, _, err := kubeconfig.Load(path)
	if err != nil {
		return nil, nil, err
	}
	cfg.QPS, cfg.Burst = 50, 100
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating dynamic client: %w", err)
	}
	kube, err := kube.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("creating client: %w", err)
	}
	return dyn, kube, nil
}

// status lists the handlers the broker knows from their Leases: instances,
// when last seen, whether they are absent, and how many objects they hold.
func status(args []string, stdout, stderr io.Writer) error {
	var kubeconfig, namespace string
	fs := flag.NewFlagSet("broker status", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: broker status [flags]\n\nLists the handlers recorded in the broker's namespace: instances connected, when\nlast seen, whether absent or orphaned (absent, with STRICT bindings, and its identity\ncan no longer sign in), how many objects carry each one's hold, how many\nadmission webhooks its configurations (tether-<handler>) have, and the objects being\ndeleted each has held past the broker's --stuck-after, with why the hold stays.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	commonFlags(fs, &kubeconfig, &namespace)
	if err := fs.Parse(args); err != nil {
		return err
	}
	dyn, kube, err := clients(kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	store := &presence.Store{Client: kube, Namespace: namespace}
	records, err := store.List(ctx)
	if err != nil {
		return err
	}
	sort.Slice(records, func(i, j int) bool { return records[i].Handler < records[j].Handler })
	holds, err := release.Run(ctx, release.Options{Client: dyn, Presence: store, DryRun: true})
	if err != nil {
		return fmt.Errorf("counting holds: %w", err)
	}
	count := map[string]int{}
	for _, h := range holds {
		count[h.Handler]++
	}
	now := time.Now()
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "HANDLER\tINSTANCES\tSTATE\tLAST SEEN\tGRACE\tABSENT RELEASE AFTER\tHOLDS\tWEBHOOKS\tRESOURCES")
	for _, r := range records {
		var res []string
		for _, gvr := range r.Resources {
			res = append(res, gvr.Resource+"."+gvr.Group)
		}
		fmt.Fprintf(w, "%s\t%d\t%s\t%s ago\t%v\t%s\t%d\t%s\t%s\n", r.Handler, r.Instances, state(r, now),
			now.Sub(r.LastSeen).Round(time.Second), r.Grace, never(r.AbsentReleaseAfter), count[r.Handler],
			webhooks(ctx, kube, r.Handler), strings.TrimSuffix(strings.Join(res, ","), "."))
	}
	if len(records) == 0 {
		fmt.Fprintf(stdout, "no handlers recorded in namespace %s\n", namespace)
		return nil
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, r := range records {
		if r.Marks.Orphaned != "" {
			fmt.Fprintf(stdout, "\nhandler %s is orphaned: %s\n", r.Handler, r.Marks.Orphaned)
		}
		if r.Marks.NotRestored != "" {
			fmt.Fprintf(stdout, "\nhandler %s was not restored from its lease: %s\n", r.Handler, r.Marks.NotRestored)
		}
	}
	for _, r := range records {
		printStuck(stdout, r, now)
	}
	return nil
}

func state(r presence.Record, now time.Time) string {
	if r.Unreadable != nil {
		return fmt.Sprintf("unreadable lease (%v)", r.Unreadable)
	}
	switch {
	case !r.Marks.Released.IsZero():
		return "released on request (broker release --handler " + r.Handler + " deletes its lease)"
	case !r.Marks.ReleaseRequested.IsZero():
		return "release requested"
	case r.Marks.Orphaned != "":
		return "orphaned"
	case r.Marks.NotRestored != "":
		return "not restored"
	}
	if r.Instances > 0 {
		if stale := now.Sub(r.LastSeen); stale > staleAfter {
			return fmt.Sprintf("present? (not renewed for %v: is the broker running?)", stale.Round(time.Second))
		}
		return "present"
	}
	gone := now.Sub(r.AbsentSinceOrLastSeen())
	switch {
	case r.AbsentReleaseAfter > 0 && gone >= r.AbsentReleaseAfter:
		return "absent, holds stripped"
	case gone >= r.Grace:
		return "absent"
	default:
		return fmt.Sprintf("in grace (%v left)", (r.Grace - gone).Round(time.Second))
	}
}

// webhooks counts the webhooks in the handler's two configurations, or says
// why it cannot.
func webhooks(ctx context.Context, kube kube.Interface, handler string) string {
	name := webhook.ConfigName(handler)
	n := 0
	v, err := kube.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		n += len(v.Webhooks)
	case !apierrors.IsNotFound(err):
		return "?"
	}
	m, err := kube.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		n += len(m.Webhooks)
	case !apierrors.IsNotFound(err):
		return "?"
	}
	return strconv.Itoa(n)
}

func never(d time.Duration) string {
	if d <= 0 {
		return "never"
	}
	return d.String()
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
