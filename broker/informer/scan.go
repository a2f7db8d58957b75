package informer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/types"
)

// fromJSON makes the cached form of an object from the JSON the API server
// sent, in one pass over the bytes after checking they are valid JSON: it
// reads the few metadata fields of Object and cuts metadata.managedFields
// out. Decoding the object instead (into maps, as an unstructured object)
// and encoding it again costs several times the CPU and the garbage, on
// every watch event.
func fromJSON(data []byte) (*Object, error) {
	if !json.Valid(data) {
		return nil, errors.New("reading an object: not valid JSON")
	}
	s := scanner{data: data}
	o := &Object{}
	var cuts [][2]int // the managedFields members, each with one comma beside it
	err := s.members(func(key []byte, start, end int) error {
		if string(key) != "metadata" {
			return nil
		}
		// Of repeated keys the last counts, as when decoding.
		*o, cuts = Object{}, nil
		inner := scanner{data: data, i: start}
		return inner.members(func(key []byte, vstart, vend int) error {
			value := data[vstart:vend]
			var err error
			switch string(key) {
			case "namespace":
				o.Namespace, err = jsonString(value)
			case "name":
				o.Name, err = jsonString(value)
			case "uid":
				var uid string
				uid, err = jsonString(value)
				o.UID = types.UID(uid)
			case "resourceVersion":
				o.ResourceVersion, err = jsonString(value)
			case "deletionTimestamp":
				o.Deleting = string(value) != "null"
			case "managedFields":
				cuts = append(cuts, inner.member)
			}
			if err != nil {
				return fmt.Errorf("reading metadata.%s: %w", key, err)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("reading an object: %w", err)
	}
	if len(cuts) == 0 {
		o.Raw = data
		return o, nil
	}
	o.Raw = make([]byte, 0, len(data))
	from := 0
	for _, c := range cuts {
		// Spans of neighbours may share their comma.
		o.Raw = append(o.Raw, data[from:max(from, c[0])]...)
		from = max(from, c[1])
	}
	o.Raw = append(o.Raw, data[from:]...)
	return o, nil
}

// jsonString reads a JSON string value; null is "".
func jsonString(v []byte) (string, error) {
	if len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 {
		return string(v[1 : len(v)-1]), nil
	}
	if string(v) == "null" {
		return "", nil
	}
	var s string
	err := json.Unmarshal(v, &s)
	return s, err
}

// scanner walks JSON already known to be valid.
type scanner struct {
	data []byte
	i    int
	// member is the span of the member last given to members' function,
	// with the comma before it (or, for the first, the one after it), so
	// that cutting it leaves valid JSON.
	member [2]int
}

// members calls fn with each member of the object at s.i (key unescaped
// only when it has no escapes: the keys looked for have none) and the span
// of its value.
func (s *scanner) members(fn func(key []byte, start, end int) error) error {
	s.space()
	if s.i >= len(s.data) || s.data[s.i] != '{' {
		return errors.New("not a JSON object")
	}
	s.i++
	first := true
	for {
		s.space()
		if s.data[s.i] == '}' {
			s.i++
			return nil
		}
		begin := s.i // at the key, or at the comma before it
		if !first {
			s.i++ // ','
			s.space()
		}
		keyStart := s.i
		s.skip()
		key := s.data[keyStart+1 : s.i-1]
		s.space()
		s.i++ // ':'
		s.space()
		start := s.i
		s.skip()
		end := s.i
		s.space()
		if first {
			// The comma after the first member goes with it.
			s.member = [2]int{begin, end}
			if s.data[s.i] == ',' {
				s.member[1] = s.i + 1
			} else {
				s.member[1] = s.i
			}
		} else {
			s.member = [2]int{begin, end}
		}
		if err := fn(key, start, end); err != nil {
			return err
		}
		first = false
	}
}

// skip moves past the value at s.i.
func (s *scanner) skip() {
	switch s.data[s.i] {
	case '"':
		s.i++
		for s.data[s.i] != '"' {
			if s.data[s.i] == '\\' {
				s.i++
			}
			s.i++
		}
		s.i++
	case '{', '[':
		depth := 0
		for {
			switch s.data[s.i] {
			case '"':
				s.skip()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			s.i++
			if depth == 0 {
				return
			}
		}
	default: // a number, true, false or null
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return
			}
			s.i++
		}
	}
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}
