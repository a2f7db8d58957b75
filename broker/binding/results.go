package binding

import (
	"errors"
	"fmt"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Results is where a binding's results are stored.
type Results struct {
	// Status stores them in status.<Key>; otherwise in the handler's
	// annotation for the binding.
	Status bool
	// Key is the key under status, with Status: the binding's result_key,
	// or its id.
	Key string
}

// resultsOf reads a binding's results and result_key. The key is one
// literal key of a merge patch, never split into a path; it is bounded and
// kept to printable ASCII so that what the handler names is what shows in
// kubectl and a printer column's JSONPath.
func resultsOf(b *Binding, pb *tetherv1.Binding) (Results, error) {
	key := pb.GetResultKey()
	switch pb.GetResults() {
	case tetherv1.ResultStore_RESULT_STORE_UNSPECIFIED, tetherv1.ResultStore_RESULT_STORE_ANNOTATION:
		if key != "" {
			return Results{}, fieldErr("result_key", errors.New("is only for results stored in status (RESULT_STORE_STATUS)"))
		}
		return Results{}, nil
	case tetherv1.ResultStore_RESULT_STORE_STATUS:
	default:
		return Results{}, fieldErr("results", fmt.Errorf("unknown result store %v", pb.GetResults()))
	}
	if b.Kind.IsAdmission() {
		return Results{}, fieldErr("results", fmt.Errorf("%s bindings store no results", b.Kind))
	}
	if key == "" {
		key = b.ID
	}
	if err := ValidateResultKey(key); err != nil {
		return Results{}, fieldErr("result_key", err)
	}
	return Results{Status: true, Key: key}, nil
}

// ValidateResultKey checks a key under status that results are stored in.
func ValidateResultKey(key string) error {
	if len(key) > tetherv1.MaxResultKeyBytes {
		return fmt.Errorf("%d bytes, more than %d", len(key), tetherv1.MaxResultKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%q: byte %d is not printable ASCII other than a space", key, i)
		}
	}
	return nil
}
