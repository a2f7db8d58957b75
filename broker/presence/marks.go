package presence

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The annotations of Marks. They are written with merge patches, apart
// from the record, so that neither a keeper's Put nor `broker release`
// overwrites the other's.
const (
	annOrphaned         = "tether.dev/orphaned"
	annReleaseRequested = "tether.dev/release-requested"
	annReleasing        = "tether.dev/releasing"
	annReleased         = "tether.dev/released"
	annNotRestored      = "tether.dev/not-restored"
)

// User is an identity a handler signed in as.
type User struct {
	Name   string   `json:"name"`
	Groups []string `json:"groups,omitempty"`
}

// ServiceAccount is the namespace and name of the ServiceAccount u is, or
// ok false when u is another kind of user.
func (u User) ServiceAccount() (namespace, name string, ok bool) {
	rest, found := strings.CutPrefix(u.Name, "system:serviceaccount:")
	if !found {
		return "", "", false
	}
	namespace, name, ok = strings.Cut(rest, ":")
	return namespace, name, ok && namespace != "" && name != ""
}

func (u User) encode() string {
	b, _ := json.Marshal(u) // strings only: cannot fail
	return string(b)
}

func decodeUser(v string) (User, error) {
	var u User
	if v == "" {
		return u, nil
	}
	err := json.Unmarshal([]byte(v), &u)
	return u, err
}

// Marks say what is known of a handler beyond its record.
type Marks struct {
	// Orphaned is why the leader found the handler orphaned (Orphan);
	// empty when it is not.
	Orphaned string
	// ReleaseRequested is when `broker release --handler` asked the
	// running broker to release the handler; zero when nobody did.
	ReleaseRequested time.Time
	// Releasing is when a running broker took the request up.
	Releasing time.Time
	// Released is when a broker released the handler on request: its
	// Lease stays only until `broker release` deletes it, and no broker
	// restores the handler from it.
	Released time.Time
	// NotRestored is why the broker would not restore the handler from its
	// Lease (its recorded identity failed the rights check of a Hello);
	// empty when it did, and cleared once an instance signs in again.
	NotRestored string
}

func decodeMarks(a map[string]string) Marks {
	m := Marks{Orphaned: a[annOrphaned], NotRestored: a[annNotRestored]}
	// A mark that does not parse counts as set now: it was set.
	at := func(v string) time.Time {
		if v == "" {
			return time.Time{}
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Now()
		}
		return t
	}
	m.ReleaseRequested, m.Releasing, m.Released = at(a[annReleaseRequested]), at(a[annReleasing]), at(a[annReleased])
	return m
}

// MarkOrphaned records why handler is orphaned, or clears it (empty).
func (s *Store) MarkOrphaned(ctx context.Context, handler, why string) error {
	return s.annotate(ctx, handler, map[string]any{annOrphaned: orNull(why)})
}

// MarkNotRestored records why the broker did not restore handler from its
// Lease, or clears it (empty).
func (s *Store) MarkNotRestored(ctx context.Context, handler, why string) error {
	return s.annotate(ctx, handler, map[string]any{annNotRestored: orNull(why)})
}

// RequestRelease asks the running broker to release handler.
func (s *Store) RequestRelease(ctx context.Context, handler string, at time.Time) error {
	return s.annotate(ctx, handler, map[string]any{annReleaseRequested: at.UTC().Format(time.RFC3339Nano)})
}

// MarkReleasing records that a running broker took the release of handler
// up, so that `broker release` waits for it however long the release takes.
func (s *Store) MarkReleasing(ctx context.Context, handler string, at time.Time) error {
	return s.annotate(ctx, handler, map[string]any{annReleasing: at.UTC().Format(time.RFC3339Nano)})
}

// MarkReleased records that handler was released on request, and clears
// the request and the orphan mark.
func (s *Store) MarkReleased(ctx context.Context, handler string, at time.Time) error {
	return s.annotate(ctx, handler, map[string]any{
		annReleased: at.UTC().Format(time.RFC3339Nano), annReleaseRequested: nil, annReleasing: nil, annOrphaned: nil,
	})
}

// RefuseRelease clears a release request the broker will not act on.
func (s *Store) RefuseRelease(ctx context.Context, handler string) error {
	return s.annotate(ctx, handler, map[string]any{annReleaseRequested: nil, annReleasing: nil})
}

// Delete deletes handler's Lease; one already gone is not an error.
func (s *Store) Delete(ctx context.Context, handler string) error {
	err := s.Client.CoordinationV1().Leases(s.Namespace).Delete(ctx, LeaseName(handler), metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the lease of handler %s: %w", handler, err)
	}
	return nil
}

func (s *Store) annotate(ctx context.Context, handler string, ann map[string]any) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": ann}})
	if err != nil {
		return err
	}
	_, err = s.Client.CoordinationV1().Leases(s.Namespace).Patch(ctx, LeaseName(handler), types.MergePatchType, patch, metav1.PatchOptions{})
	if err != nil {
		return fmt.Errorf("annotating the lease of handler %s: %w", handler, err)
	}
	return nil
}

func orNull(v string) any {
	if v == "" {
		return nil
	}
	return v
}
