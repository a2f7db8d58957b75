package main

import (
	"bytes"
	"fmt"
	"strings"
)

// render writes the page: who it is for, how it is made, then one section
// per command with its usage, description and a table of its flags.
func render(sections []section) []byte {
	var b bytes.Buffer
	b.WriteString("For operators and developers looking up a flag of the broker, its subcommands or the example handler.\n\n")
	b.WriteString("# Flag reference\n\n")
	b.WriteString("Generated from the binaries' own `-help` by `make docs`; do not edit by hand (a test fails when\n")
	b.WriteString("this page and the binaries disagree). A flag is given as `--name value` or `--name=value`; a\n")
	b.WriteString("boolean as `--name` or `--name=false`. What the flags do together is in the pages the\n")
	b.WriteString("[docs index](../../README.md#documentation) lists.\n")
	for _, s := range sections {
		fmt.Fprintf(&b, "\n## %s\n\n```\n%s\n```\n", s.title, strings.Join(s.usage, "\n"))
		if len(s.description) > 0 {
			fmt.Fprintf(&b, "\n%s\n", escape(strings.Join(s.description, "\n")))
		}
		b.WriteString("\n| flag | default | meaning |\n| --- | --- | --- |\n")
		for _, f := range s.flags {
			name := "--" + f.name
			if f.value != "" {
				name += " " + f.value
			}
			def := ""
			switch {
			case f.def != "":
				def = "`" + f.def + "`"
			case f.value == "": // a boolean, whose zero default the flag package leaves out
				def = "`false`"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s |\n", name, def, escape(f.text))
		}
	}
	return b.Bytes()
}

// escape keeps text the binaries print from being read as HTML (the
// "<handler>" of tether.dev/<handler>) or as a table's column separator.
var escape = strings.NewReplacer("<", "&lt;", ">", "&gt;", "|", `\|`).Replace
