package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/tether-dev/tether/test/bench/workload"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/testenv"
)

// The failover benchmark's review load (-reviews): Widgets created at a
// steady rate in a namespace of their own, through the API server, by a
// user the webhooks do not exempt. The bench handler's fail-open mutate
// binding labels each (workload.ReviewedKey) on whichever replica the
// admission Service (a balancer over both replicas' admission listeners)
// sends the review to. A create that comes back without the label was
// admitted without the handler: its webhook failed open.

// reviewUser is whom the load writes as: the brokers' own user (the
// bench's admin) is let through every webhook.
const reviewUser = "bench-reviews"

// errFailedOpen marks a create admitted without the handler's review.
var errFailedOpen = errors.New("admitted without the handler's label: the webhook failed open")

// reviewCounts sorts the creates of the review load begun from a stop on.
type reviewCounts struct {
	answered, failedOpen, refused int
	// inFlight counts the creates begun before the stop that failed
	// either way: a review under way on the stopped replica's connection is
	// lost whatever the brokers do, since the API server does not retry a
	// webhook call.
	inFlight int
	// first is the first failure begun from the stop on, for the log.
	first *testenv.Write
	// sent counts every create of the load and its probes, which the
	// brokers' writes on Widgets leave out.
	sent int
}

// failed counts the creates begun from the stop on that the handler did
// not review.
func (c reviewCounts) failed() int { return c.failedOpen + c.refused }

// reviewClient is a client that writes as reviewUser.
func reviewClient(admin *rest.Config) (dynamic.Interface, error) {
	cfg := rest.CopyConfig(admin)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.Impersonate = rest.ImpersonationConfig{UserName: reviewUser, Groups: []string{"system:masters", "system:authenticated"}}
	return dynamic.NewForConfig(cfg)
}

// reviewed creates Widget name in ns and tells how it was admitted.
func reviewed(ctx context.Context, c dynamic.Interface, ns, name string) error {
	obj, err := c.Resource(controlplane.WidgetGVR).Namespace(ns).Create(ctx, newWidget(ns, name, 0), metav1.CreateOptions{})
	switch {
	case err != nil:
		return err
	case obj.GetLabels()[workload.ReviewedKey] != "true":
		return errFailedOpen
	}
	return nil
}

// reviewLoad is the load of one stop, and the probes that waited for the
// handler to review before it.
type reviewLoad struct {
	*testenv.WriteLoad
	probes int
}

// startReviews creates probes in ns until the handler reviews one (its
// webhook is registered and answered), then starts the load at
// e.reviewRate a second; nil when -reviews is 0.
func startReviews(ctx context.Context, e *env, c dynamic.Interface, ns, prefix string) (*reviewLoad, error) {
	if e.reviewRate == 0 {
		return nil, nil
	}
	l := &reviewLoad{}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l.probes++
		return reviewed(ctx, c, ns, fmt.Sprintf("%s-probe-%d", prefix, l.probes)) == nil, nil
	})
	if err != nil {
		return nil, fmt.Errorf("waiting for the handler to review Widgets in %s (%d probes): %w", ns, l.probes, err)
	}
	l.WriteLoad = testenv.StartWriteLoad(e.reviewRate, func(i int) error {
		return reviewed(ctx, c, ns, fmt.Sprintf("%s-%05d", prefix, i))
	})
	return l, nil
}

// countReviews stops the load and sorts its creates by how they were
// admitted, from stop on.
func countReviews(l *reviewLoad, stop time.Time) reviewCounts {
	var c reviewCounts
	if l == nil {
		return c
	}
	writes := l.Stop()
	c.sent = l.probes + len(writes)
	for _, w := range writes {
		switch {
		case w.Err != nil && w.Began.Before(stop):
			c.inFlight++
			continue
		case w.Began.Before(stop):
			continue
		case w.Err == nil:
			c.answered++
			continue
		case errors.Is(w.Err, errFailedOpen):
			c.failedOpen++
		default:
			c.refused++
		}
		if c.first == nil {
			c.first = &w
		}
	}
	return c
}
