// Package workload names what the create/delete benchmark's handlers and
// its raw controller write on each new Widget besides their hold, so that
// the bench (test/bench), the Go handler (test/bench/handler) and the raw
// controller (test/bench/raw) agree on it. The Python handler
// (test/bench/handler/handler.py) spells the same names.
package workload

import (
	"fmt"
	"slices"
	"strings"
)

// The workloads of the bench's -workloads.
const (
	// Result: a small result the broker stores as an annotation (the
	// handler's ev.SetResult, a Python function's return value); for the
	// raw controller, an annotation of its own.
	Result = "result"
	// Label: the label LabelKey set (the ack's patch).
	Label = "label"
	// Status: status.<StatusField> set through the status subresource
	// (the ack's status_patch).
	Status = "status"
)

// All lists every workload, in the bench's order.
var All = []string{Result, Label, Status}

// The label and the status field the workloads Label and Status set, to
// "true" and true.
const (
	LabelKey    = "bench.example.com/handled"
	StatusField = "handled"
)

// ReviewedKey is the label the Go handler's mutate binding sets to "true"
// on each Widget of the failover benchmark's review load: a Widget created
// without it was admitted without the handler (its webhook failed open).
const ReviewedKey = "bench.example.com/reviewed"

// Check returns an error when name is not a workload.
func Check(name string) error {
	if !slices.Contains(All, name) {
		return fmt.Errorf("workload %q is none of %s", name, strings.Join(All, ", "))
	}
	return nil
}
