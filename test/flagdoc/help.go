package main

import (
	"errors"
	"strconv"
	"strings"
)

// section is what one command's -help says: its usage lines, the text that
// describes it and its flags, in the order the flag package prints them.
type section struct {
	title       string
	usage       []string
	description []string
	flags       []flagDoc
}

type flagDoc struct {
	name, value, def, text string
}

// The flag package prints each flag as "  -name value" followed by its
// usage on lines indented with four spaces and a tab (a one-letter flag
// without a value name keeps both on one line, after a tab).
const (
	flagPrefix = "  -"
	textPrefix = "    \t"
)

// parseHelp reads the output of flag.FlagSet.Usage in the shape the
// commands' Usage functions share: usage lines, a blank line, a description,
// a blank line and "Flags:", then the flag package's PrintDefaults.
func parseHelp(title, help string) (section, error) {
	head, defaults, ok := strings.Cut(help, "\nFlags:\n")
	if !ok {
		return section{}, errors.New(`no "Flags:" line`)
	}
	s := section{title: title}
	usage, description, _ := strings.Cut(strings.TrimSpace(head), "\n\n")
	for _, l := range strings.Split(usage, "\n") {
		s.usage = append(s.usage, strings.TrimSpace(strings.TrimPrefix(l, "Usage:")))
	}
	if description != "" {
		s.description = strings.Split(strings.TrimSpace(description), "\n")
	}
	var text []string
	finish := func() {
		if n := len(s.flags); n > 0 {
			f := &s.flags[n-1]
			f.text, f.def = splitDefault(strings.Join(text, " "), f.value)
		}
		text = nil
	}
	for _, l := range strings.Split(strings.TrimRight(defaults, "\n"), "\n") {
		switch {
		case strings.HasPrefix(l, textPrefix):
			if len(s.flags) == 0 {
				return section{}, errors.New("flag text before any flag: " + l)
			}
			text = append(text, strings.TrimPrefix(l, textPrefix))
		case strings.HasPrefix(l, flagPrefix):
			finish()
			header, inline, _ := strings.Cut(strings.TrimPrefix(l, flagPrefix), "\t")
			name, value, _ := strings.Cut(header, " ")
			s.flags = append(s.flags, flagDoc{name: name, value: value})
			if inline != "" {
				text = append(text, inline)
			}
		default:
			return section{}, errors.New("a line the flag package does not print: " + l)
		}
	}
	finish()
	if len(s.flags) == 0 {
		return section{}, errors.New("no flags")
	}
	return s, nil
}

// splitDefault takes the " (default ...)" the flag package appends to a
// flag's text when its default is not the zero value. A string default is
// quoted, whatever the value's name; any other has no space. A usage text
// that itself ends in a parenthesis about the default (the broker's
// --identity) is neither, and is left as text.
func splitDefault(text, value string) (string, string) {
	i := strings.LastIndex(text, " (default ")
	if i < 0 || !strings.HasSuffix(text, ")") {
		return text, ""
	}
	def := text[i+len(" (default ") : len(text)-1]
	if unq, err := strconv.Unquote(def); err == nil && strings.HasPrefix(def, `"`) {
		return text[:i], unq
	}
	if value == "string" || def == "" || strings.ContainsAny(def, " \"") {
		return text, ""
	}
	return text[:i], def
}
