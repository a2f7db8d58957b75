package session

import (
	"testing"

	"google.golang.org/grpc/codes"
)

// TestAReviewsOnlySessionIsSaidInWelcomeAndEndedWhenTheReplicaLeads: a
// session the Attacher takes for reviews only (a follower) says so in
// Welcome, and ends with Unavailable, for the instance to reconnect at
// once, when the Attacher ends it (the replica comes to lead).
func TestAReviewsOnlySessionIsSaidInWelcomeAndEndedWhenTheReplicaLeads(t *testing.T) {
	h := start(t, Options{})
	h.attacher.ended = make(chan struct{})
	c := h.connect(t)
	c.send(hello())
	if w := c.welcome(); !w.GetReviewsOnly() {
		t.Errorf("Welcome.reviews_only = false for a reviews-only session")
	}
	h.instance(t)
	close(h.attacher.ended)
	if st := c.end(); st.Code() != codes.Unavailable {
		t.Errorf("the session ended with %v, want Unavailable", st)
	}
}
