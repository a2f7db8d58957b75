package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/broker/guard"
	"github.com/tether-dev/tether/broker/kube"
	"github.com/tether-dev/tether/broker/presence"
	"github.com/tether-dev/tether/broker/release"
	"github.com/tether-dev/tether/broker/webhook"
)

// defaultReleaseWait is how long `broker release --handler` waits for a
// running broker to take its request up: the broker looks for requests
// every few seconds.
const defaultReleaseWait = 15 * time.Second

// releaseCmd strips holds from a terminal or a Job. A running broker is
// asked to release the named handlers itself; what no broker takes up is
// released here.
func releaseCmd(args []string, stdout, stderr io.Writer) error {
	var kubeconfig, namespace string
	var handlers multiFlag
	var all, dryRun bool
	var waitFor time.Duration
	fs := flag.NewFlagSet("broker release", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: broker release (--handler NAME ... | --all) [flags]\n\n"+
			"Removes the holds (finalizers tether.dev/<handler>) of the named handlers, or of\n"+
			"every handler recorded in the broker's namespace, from every object of their\n"+
			"resources, and prints each object released. It also removes the handlers'\n"+
			"webhook configurations (tether-<handler>), so that no webhook is left pointing\n"+
			"at a broker that is gone, and their presence Leases, so that no broker brings\n"+
			"them back. With --handler it first asks a running broker to do it (the\n"+
			"handler must have no instance connected) and waits --wait for it; what no\n"+
			"broker takes up in that time is released here. With --all, run it with the\n"+
			"broker stopped (a running broker adds the holds and webhooks of connected\n"+
			"handlers back); it also takes the uninstall guard (finalizer "+guard.Finalizer+")\n"+
			"off the broker's ServiceAccount, Roles, RoleBindings and Leases.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	commonFlags(fs, &kubeconfig, &namespace)
	fs.Var(&handlers, "handler", "a handler whose holds to release (repeatable)")
	fs.BoolVar(&all, "all", false, "release the holds of every recorded handler")
	fs.BoolVar(&dryRun, "dry-run", false, "print what would be released and change nothing")
	fs.DurationVar(&waitFor, "wait", defaultReleaseWait, "with --handler, how long to wait for a running broker to take the release up (0: do not ask one; the broker is stopped)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if all == (len(handlers) > 0) {
		fs.Usage()
		return errors.New("give either --handler NAME (one or more) or --all")
	}
	dyn, kube, err := clients(kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute+waitFor)
	defer cancel()
	log := newLogger("info", "text", stderr)
	store := &presence.Store{Client: kube, Namespace: namespace}
	var byBroker []string
	if len(handlers) > 0 && !dryRun && waitFor > 0 {
		var aerr error
		byBroker, aerr = askBroker(ctx, store, handlers, waitFor, stdout, log)
		if aerr != nil {
			return aerr
		}
	}
	left := slices.DeleteFunc(slices.Clone(handlers), func(h string) bool { return slices.Contains(byBroker, h) })
	if !all && len(left) == 0 {
		return nil
	}
	err = releaseHere(ctx, store, dyn, kube, left, dryRun, stdout, log)
	if !all || dryRun {
		return err
	}
	// The guard would keep the namespace from being deleted.
	freed, gerr := guard.UnprotectAll(ctx, dyn, namespace)
	for _, r := range freed {
		fmt.Fprintf(stdout, "%s: uninstall guard taken off\n", r)
	}
	return errors.Join(err, gerr)
}

// releaseHere releases handlers (every one when none is named) from this
// process, then deletes their Leases unless a hold could not be released:
// the Lease is what lets a second run find them.
func releaseHere(ctx context.Context, store *presence.Store, dyn dynamic.Interface, kube kube.Interface, handlers []string, dryRun bool, stdout io.Writer, log hclog.Logger) error {
	records, lerr := store.List(ctx)
	released, err := release.Run(ctx, release.Options{
		Client: dyn, Presence: store, Handlers: handlers, Out: stdout, DryRun: dryRun, Log: log,
	})
	verb := "released"
	if dryRun {
		verb = "would release"
	}
	fmt.Fprintf(stdout, "%s %d hold(s)\n", verb, len(released))
	removed, werr := removeWebhooks(ctx, kube, handlers, dryRun, log)
	for _, r := range removed {
		fmt.Fprintln(stdout, r)
	}
	verb = "removed"
	if dryRun {
		verb = "would remove"
	}
	fmt.Fprintf(stdout, "%s %d webhook configuration(s)\n", verb, len(removed))
	if err != nil || werr != nil || lerr != nil || dryRun {
		return errors.Join(err, werr)
	}
	var derr []error
	for _, r := range records {
		if len(handlers) == 0 || slices.Contains(handlers, r.Handler) {
			if e := store.Delete(ctx, r.Handler); e != nil {
				derr = append(derr, e)
				continue
			}
			fmt.Fprintf(stdout, "lease %s deleted\n", presence.LeaseName(r.Handler))
		}
	}
	return errors.Join(derr...)
}

// askBroker asks a running broker to release handlers through their
// Leases, waits up to waitFor for it to take each request up, then for it
// to finish. It returns those the broker released, whose Leases it then
// deletes; the others (no Lease, or no broker took the request up) are
// left to release here. A broker that refuses (an instance connected) ends
// the command with an error: releasing here would race the handler.
func askBroker(ctx context.Context, store *presence.Store, handlers []string, waitFor time.Duration, stdout io.Writer, log hclog.Logger) ([]string, error) {
	records, err := store.List(ctx)
	if err != nil {
		return nil, err
	}
	asked := map[string]bool{}
	for _, r := range records {
		if !slices.Contains(handlers, r.Handler) {
			continue
		}
		// Whether an instance is connected, only a running broker knows:
		// a Lease left by a broker that died says what was then.
		if r.Marks.Released.IsZero() {
			if err := store.RequestRelease(ctx, r.Handler, time.Now()); err != nil {
				return nil, err
			}
		}
		asked[r.Handler] = true
	}
	if len(asked) == 0 {
		return nil, nil
	}
	fmt.Fprintf(stdout, "asked a running broker to release %d handler(s); waiting up to %v for it to take them up\n", len(asked), waitFor)
	taken, err := awaitBroker(ctx, store, asked, waitFor, func(m presence.Marks) bool { return !m.Releasing.IsZero() || !m.Released.IsZero() }, log)
	if err != nil {
		return nil, err
	}
	if len(taken) < len(asked) {
		fmt.Fprintf(stdout, "no running broker took up %d handler(s) within %v: releasing them here\n", len(asked)-len(taken), waitFor)
	}
	if len(taken) == 0 {
		return nil, nil
	}
	want := map[string]bool{}
	for _, h := range taken {
		want[h] = true
	}
	done, err := awaitBroker(ctx, store, want, 0, func(m presence.Marks) bool { return !m.Released.IsZero() }, log)
	if err != nil {
		return nil, err
	}
	if len(done) < len(want) {
		return nil, fmt.Errorf("the broker took up the release of %d handler(s) and did not finish it: see its log and the Events of their leases", len(want)-len(done))
	}
	var errs []error
	for _, h := range done {
		fmt.Fprintf(stdout, "the broker released handler %s\n", h)
		if err := store.Delete(ctx, h); err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "lease %s deleted\n", presence.LeaseName(h))
	}
	return done, errors.Join(errs...)
}

// awaitBroker waits until the marks of every handler in want say reached,
// or for limit (0: as long as ctx lasts), and returns those that did. A
// request cleared without a release is the broker's refusal.
func awaitBroker(ctx context.Context, store *presence.Store, want map[string]bool, limit time.Duration, reached func(presence.Marks) bool, log hclog.Logger) ([]string, error) {
	wctx := ctx
	if limit > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, limit)
		defer cancel()
	}
	var done []string
	var refused error
	_ = wait.PollUntilContextCancel(wctx, 500*time.Millisecond, true, func(context.Context) (bool, error) {
		records, err := store.List(ctx)
		if err != nil {
			log.Warn("cannot read the presence leases; waiting", "error", err)
			return false, nil
		}
		done = done[:0]
		for _, r := range records {
			switch {
			case !want[r.Handler]:
			case reached(r.Marks):
				done = append(done, r.Handler)
			case r.Marks.ReleaseRequested.IsZero() && r.Marks.Releasing.IsZero():
				refused = fmt.Errorf("the broker refused to release handler %s: an instance is connected (see the Events of lease %s)", r.Handler, presence.LeaseName(r.Handler))
				return true, nil
			}
		}
		return len(done) == len(want), nil
	})
	return done, refused
}

// removeWebhooks deletes the webhook configurations the broker wrote for
// handlers (every handler when none is named): with the broker gone, a
// STRICT handler's webhook would refuse every request on its resource.
func removeWebhooks(ctx context.Context, kube kube.Interface, handlers []string, dryRun bool, log hclog.Logger) ([]string, error) {
	m, err := webhook.New(webhook.Options{Client: kube, Log: log})
	if err != nil {
		return nil, err
	}
	if len(handlers) == 0 {
		return m.RemoveManaged(ctx, "", dryRun)
	}
	var all []string
	var errs []error
	for _, h := range handlers {
		removed, err := m.RemoveManaged(ctx, h, dryRun)
		all, errs = append(all, removed...), append(errs, err)
	}
	return all, errors.Join(errs...)
}
