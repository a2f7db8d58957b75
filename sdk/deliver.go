package sdk

import (
	"context"
	"runtime/debug"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/types/known/durationpb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// maxAckMessage bounds Ack.message, and the messages of the function's
// Events: the broker posts them as Kubernetes Event messages.
const maxAckMessage = tetherv1.MaxEventMessageBytes

// invoke runs the binding's function for one delivery and builds its ack.
func (h *Handler) invoke(c *call) *tetherv1.Ack {
	if c.kind.admission() {
		return h.review(c)
	}
	id := c.d.GetId()
	ev, err := newEvent(c.d, c.kind, c.log)
	if err != nil {
		c.log.Error("malformed delivery", "error", err)
		return failAck(id, "malformed delivery: "+err.Error())
	}
	ctx, span := h.traced(c)
	start := time.Now()
	err = callSafely(ctx, c.b.fn, ev, c.log)
	outcome, msg, after := classify(err)
	ack := &tetherv1.Ack{DeliveryId: id, Outcome: outcome}
	if outcome == tetherv1.Outcome_OUTCOME_OK {
		if err := ev.encode(ack); err != nil {
			c.log.Error("delivery failed: cannot encode what the function set", "error", err)
			ack = failAck(id, err.Error())
		}
	} else {
		ack.Message = truncate(msg)
		if after > 0 {
			ack.RetryAfter = durationpb.New(after)
		}
	}
	// Whatever the outcome: Events say what happened on the way to it.
	ack.Events = ev.recorded()
	logOutcome(c.log, ack, time.Since(start))
	endTraced(span, ack)
	return ack
}

func logOutcome(log hclog.Logger, ack *tetherv1.Ack, took time.Duration) {
	switch ack.GetOutcome() {
	case tetherv1.Outcome_OUTCOME_OK:
		log.Debug("delivery handled", "duration", took)
	case tetherv1.Outcome_OUTCOME_RETRY:
		log.Warn("delivery will be retried", "duration", took, "error", ack.GetMessage(),
			"retry_after", ack.GetRetryAfter().AsDuration())
	default:
		log.Error("delivery failed permanently", "duration", took, "error", ack.GetMessage())
	}
}

// callSafely runs fn (a Func or an AdmissionFunc), turning a panic into an
// error so that a bug in one handler function never takes the process down.
func callSafely[T any](ctx context.Context, fn func(context.Context, T) error, arg T, log hclog.Logger) (err error) {
	defer func() {
		if v := recover(); v != nil {
			log.Error("handler function panicked", "panic", v, "stack", string(debug.Stack()))
			err = &panicError{value: v}
		}
	}()
	return fn(ctx, arg)
}

func failAck(id, msg string) *tetherv1.Ack {
	return &tetherv1.Ack{DeliveryId: id, Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: truncate(msg)}
}

func retryAck(id, msg string) *tetherv1.Ack {
	return &tetherv1.Ack{DeliveryId: id, Outcome: tetherv1.Outcome_OUTCOME_RETRY, Message: truncate(msg)}
}

// truncate cuts s to maxAckMessage bytes without splitting a character.
func truncate(s string) string {
	if len(s) <= maxAckMessage {
		return s
	}
	cut := maxAckMessage - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

const modulePath = "github.com/tether-dev/tether"

// sdkName is the Hello.sdk value: "tether-go/<module version>".
var sdkName = sync.OnceValue(func() string {
	version := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Path == modulePath && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		for _, dep := range bi.Deps {
			if dep.Path == modulePath && dep.Version != "" {
				version = strings.TrimSpace(dep.Version)
			}
		}
	}
	return "tether-go/" + version
})
