package sdk

import (
	"errors"
	"fmt"
	"time"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// TemporaryError asks the broker to try the delivery again after After. A
// zero After leaves the delay to the binding's backoff. Create one with
// RetryAfter; find one with errors.As.
type TemporaryError struct {
	Err   error
	After time.Duration
}

func (e *TemporaryError) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("retry requested after %s", e.After)
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *TemporaryError) Unwrap() error { return e.Err }

func (e *TemporaryError) isOutcome() {}

// PermanentError tells the broker the delivery failed for good: it is not
// tried again. Create one with Permanent; find one with errors.As.
type PermanentError struct {
	Err error
}

func (e *PermanentError) Error() string {
	if e.Err == nil {
		return "permanent failure"
	}
	return e.Err.Error()
}

// Unwrap returns the wrapped error.
func (e *PermanentError) Unwrap() error { return e.Err }

func (e *PermanentError) isOutcome() {}

// outcomeError is implemented by the two error types that choose an ack
// outcome, so that the outermost one in a chain wins.
type outcomeError interface {
	error
	isOutcome()
}

// RetryAfter marks err as temporary: the delivery is acked RETRY and the
// broker tries again after d (or after the binding's backoff when d is zero
// or negative). A nil err is allowed: it asks to be called again later
// without reporting an error, e.g. while waiting for something to appear.
func RetryAfter(err error, d time.Duration) error {
	if d < 0 {
		d = 0
	}
	return &TemporaryError{Err: err, After: d}
}

// Permanent marks err as permanent: the delivery is acked FAIL and not tried
// again. Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &PermanentError{Err: err}
}

// panicError is what a handler function's panic turns into.
type panicError struct {
	value any
}

func (e *panicError) Error() string { return fmt.Sprintf("panic: %v", e.value) }

// classify maps the error a handler function returned to an ack outcome,
// the message, and the retry delay. The outermost TemporaryError or
// PermanentError in the chain decides; any other error is a retry with the
// binding's backoff.
func classify(err error) (outcome tetherv1.Outcome, message string, after time.Duration) {
	if err == nil {
		return tetherv1.Outcome_OUTCOME_OK, "", 0
	}
	var oe outcomeError
	if errors.As(err, &oe) {
		switch e := oe.(type) {
		case *PermanentError:
			return tetherv1.Outcome_OUTCOME_FAIL, err.Error(), 0
		case *TemporaryError:
			return tetherv1.Outcome_OUTCOME_RETRY, err.Error(), e.After
		}
	}
	return tetherv1.Outcome_OUTCOME_RETRY, err.Error(), 0
}
