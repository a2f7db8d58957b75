package informer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"
)

// Read makes the cached form of an object from the JSON the API server
// sent (a list's item, a watch event's, a write's answer), in one pass over the bytes after checking they are valid JSON: it
// reads the few metadata fields of Object and cuts metadata.managedFields
// out. Decoding the object instead (into maps, as an unstructured object)
// and encoding it again costs several times the CPU and the garbage, on
// every watch event.
func Read(data []byte) (*Object, error) {
	if !json.Valid(data) {
		return nil, errors.New("reading an object: not valid JSON")
	}
	return fromValidJSON(data)
}

// fromValidJSON is Read for JSON already known to be valid: a watch
// event's or a list item's, which encoding/json checked while it read them
// as json.RawMessage. Checking them again made reading a watch event a
// quarter slower (BenchmarkWatchEvent).
func fromValidJSON(data []byte) (*Object, error) {
	s := scanner{data: data}
	o := &Object{}
	// The raw values of namespace, name, uid and resourceVersion, read into
	// one string at the end.
	var fields [4][]byte
	var cuts [][2]int // the managedFields members, each with one comma beside it
	err := s.members(func(key []byte, start, end int) error {
		if string(key) != "metadata" {
			return nil
		}
		// Of repeated keys the last counts, as when decoding.
		o.Deleting, fields, cuts = false, [4][]byte{}, nil
		inner := scanner{data: data, i: start}
		return inner.members(func(key []byte, vstart, vend int) error {
			value := data[vstart:vend]
			switch string(key) {
			case "namespace":
				fields[0] = value
			case "name":
				fields[1] = value
			case "uid":
				fields[2] = value
			case "resourceVersion":
				fields[3] = value
			case "deletionTimestamp":
				o.Deleting = string(value) != "null"
			case "managedFields":
				cuts = append(cuts, inner.member)
			}
			return nil
		})
	})
	if err == nil {
		err = o.setFields(fields)
	}
	if err != nil {
		return nil, fmt.Errorf("reading an object: %w", err)
	}
	if len(cuts) == 0 {
		o.Raw = data
		return o, nil
	}
	// Spans of neighbours may share their comma: keep what lies between.
	keep := make([][2]int, 0, len(cuts)+1)
	from, size := 0, 0
	for _, c := range cuts {
		keep = append(keep, [2]int{from, max(from, c[0])})
		size += max(from, c[0]) - from
		from = max(from, c[1])
	}
	keep = append(keep, [2]int{from, len(data)})
	size += len(data) - from
	// Exactly the size kept: the cache holds on to every byte of it.
	o.Raw = make([]byte, 0, size)
	for _, k := range keep {
		o.Raw = append(o.Raw, data[k[0]:k[1]]...)
	}
	return o, nil
}

// setFields reads namespace, name, uid and resourceVersion from their raw
// JSON values into one string: a cache of many small objects would pay a
// header and a size class's rounding for each of four.
func (o *Object) setFields(raw [4][]byte) error {
	var parts [4][]byte
	for i, v := range raw {
		switch {
		case v == nil, string(v) == "null":
		case len(v) >= 2 && v[0] == '"' && bytes.IndexByte(v, '\\') < 0 && utf8.Valid(v):
			// The common case: no escapes. Invalid UTF-8 decodes to U+FFFD,
			// as json.Unmarshal below does it.
			parts[i] = v[1 : len(v)-1]
		default:
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("reading metadata.%s: %w", [4]string{"namespace", "name", "uid", "resourceVersion"}[i], err)
			}
			parts[i] = []byte(s)
		}
	}
	var b strings.Builder
	b.Grow(len(parts[0]) + len(parts[1]) + len(parts[2]) + len(parts[3]))
	for _, p := range parts {
		b.Write(p)
	}
	all, at := b.String(), 0
	var vals [4]string
	for i, p := range parts {
		vals[i] = all[at : at+len(p)]
		at += len(p)
	}
	o.Namespace, o.Name, o.UID, o.ResourceVersion = vals[0], vals[1], types.UID(vals[2]), vals[3]
	return nil
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
		s.member = [2]int{begin, end}
		if first && s.data[s.i] == ',' {
			s.member[1] = s.i + 1 // the comma after the first member goes with it
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
