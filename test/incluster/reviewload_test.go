package incluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/tether-dev/tether/test/example"
	"github.com/tether-dev/tether/test/testenv"
)

// handlerAnswer is in the message of the handler's refusal of a bad ttl
// (cmd/example-handler's checkTTL).
const handlerAnswer = "is not a duration"

// answered says whether the handler's answer refused w.
func answered(w testenv.Write) bool {
	return w.Err != nil && strings.Contains(w.Err.Error(), handlerAnswer)
}

// startBadTTLLoad creates Secrets with the ttl "banana" in ns, perSecond
// a second: the handler's webhook must refuse each.
func startBadTTLLoad(kube kubernetes.Interface, ns string, perSecond int) *testenv.WriteLoad {
	return testenv.StartWriteLoad(perSecond, func(int) error {
		_, err := kube.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "load-", Annotations: map[string]string{example.AnnTTL: "banana"}},
		}, metav1.CreateOptions{})
		return err
	})
}

// waitForWrites waits until n writes begun at since or later are done.
func waitForWrites(t *testing.T, load *testenv.WriteLoad, since time.Time, n int, what string) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, what, func(context.Context) error {
		if done := load.DoneSince(since); done < n {
			return fmt.Errorf("%d of %d writes done", done, n)
		}
		return nil
	})
}

// report counts the writes begun in [from, to) and fails the test for each
// that the handler did not answer, those under way when a process was
// SIGKILLed (begun before killed and ended after) included: the relay
// sends a review the killed broker did not answer to another replica.
// Those under way are counted apart too, whatever their outcome.
func report(t *testing.T, phase string, writes []testenv.Write, from, to, killed time.Time) {
	t.Helper()
	var answeredN, inFlight int
	var failedOpen, refused []testenv.Write
	for _, w := range writes {
		if w.Began.Before(from) || !w.Began.Before(to) {
			continue
		}
		if !killed.IsZero() && w.Began.Before(killed) && !w.Ended.Before(killed) {
			inFlight++
			t.Logf("%s: under way at the kill: %s", phase, w)
		}
		switch {
		case answered(w):
			answeredN++
		case w.Err == nil:
			failedOpen = append(failedOpen, w)
		default:
			refused = append(refused, w)
		}
	}
	t.Logf("%s: %d writes answered by the handler, %d failed open, %d refused without its answer; %d of them under way at the kill",
		phase, answeredN, len(failedOpen), len(refused), inFlight)
	for _, w := range failedOpen {
		t.Errorf("%s: a write admitted without the handler's answer: %s", phase, w)
	}
	for _, w := range refused {
		t.Errorf("%s: a write the handler did not answer: %s", phase, w)
	}
}
