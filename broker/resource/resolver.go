package resource

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// DefaultMinRefresh is how long the resolver keeps a snapshot of discovery
// at least before a query it cannot answer fetches a new one.
const DefaultMinRefresh = time.Second

// Options configures a Resolver. The zero value of each field but Discovery
// is its default.
type Options struct {
	Discovery Discovery
	// MinRefresh is DefaultMinRefresh when zero.
	MinRefresh time.Duration
	// Clock is the real clock when nil.
	Clock clock.WithTicker
}

// Resolver resolves queries against a snapshot of discovery. A query the
// snapshot does not answer is looked up again in a snapshot fetched after
// the query began, so a resource created a moment ago is found; fetches are
// at most one per MinRefresh, however many queries miss.
type Resolver struct {
	opts Options
	// turn is held by the one query that reads or fetches the snapshot; a
	// channel rather than a mutex so a waiting query can give up with its
	// context.
	turn    chan struct{}
	cat     *catalog
	fetched time.Time
}

// NewResolver makes a Resolver; it fetches nothing until the first query.
func NewResolver(opts Options) *Resolver {
	if opts.MinRefresh <= 0 {
		opts.MinRefresh = DefaultMinRefresh
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	return &Resolver{opts: opts, turn: make(chan struct{}, 1)}
}

// Resolve finds the resource a query names.
func (r *Resolver) Resolve(ctx context.Context, q Query) (Resource, error) {
	if err := q.check(); err != nil {
		return Resource{}, err
	}
	began := r.opts.Clock.Now()
	cat, err := r.snapshot(ctx, time.Time{})
	if err != nil {
		return Resource{}, err
	}
	res, err := cat.lookup(q)
	if !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrUnavailable) {
		return res, err
	}
	// The snapshot may predate the resource: ask again in one fetched
	// since this query began.
	if cat, err = r.snapshot(ctx, began); err != nil {
		return Resource{}, err
	}
	return cat.lookup(q)
}

// snapshot returns a catalog fetched no earlier than since, fetching one if
// need be, no sooner than MinRefresh after the last fetch.
func (r *Resolver) snapshot(ctx context.Context, since time.Time) (*catalog, error) {
	select {
	case r.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for discovery: %w", ctx.Err())
	}
	defer func() { <-r.turn }()
	if r.cat != nil && !r.fetched.Before(since) {
		return r.cat, nil
	}
	if r.cat != nil {
		if wait := r.fetched.Add(r.opts.MinRefresh).Sub(r.opts.Clock.Now()); wait > 0 {
			t := r.opts.Clock.NewTimer(wait)
			defer t.Stop()
			select {
			case <-t.C():
			case <-ctx.Done():
				return nil, fmt.Errorf("waiting to refresh discovery: %w", ctx.Err())
			}
		}
	}
	fetched := r.opts.Clock.Now()
	cat, err := fetch(r.opts.Discovery)
	if err != nil {
		return nil, err
	}
	r.cat, r.fetched = cat, fetched
	return cat, nil
}

// fetch reads all of discovery. Group versions whose resources could not be
// listed (an aggregated API that is down) are kept as failed, so queries of
// other groups still get answers.
func fetch(d Discovery) (*catalog, error) {
	groups, lists, failed, err := serverGroupsAndResources(d)
	if err != nil {
		return nil, fmt.Errorf("discovering the API server's resources: %w", classify(err))
	}
	return newCatalog(groups, lists, failed)
}

// classify tells a discovery error that answers the query (404: no such
// group or version) from one that only says no answer came.
func classify(err error) error {
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}
