package main

import (
	"os"
	"strings"
	"testing"
)

// TestEveryRuleTheKitChecksIsMarkedInTheProtocol: each scenario's rule has
// its id in docs/protocol.md, and the paragraph of that id says the kit
// checks it, naming the line it prints.
func TestEveryRuleTheKitChecksIsMarkedInTheProtocol(t *testing.T) {
	b, err := os.ReadFile("../../docs/protocol.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, sc := range scenarios {
		start := strings.LastIndex(doc, "**["+sc.rule+"]**") // the intro names one as an example
		if start < 0 {
			t.Errorf("docs/protocol.md has no rule [%s]", sc.rule)
			continue
		}
		rule := doc[start:]
		if end := strings.Index(rule[1:], "**["); end >= 0 {
			rule = rule[:end+1]
		}
		if !strings.Contains(rule, "Checked by the kit") || !strings.Contains(rule, "`"+sc.rule+"`") {
			t.Errorf("docs/protocol.md's rule [%s] does not say the kit checks it (\"Checked by the kit: `%s`\")", sc.rule, sc.rule)
		}
	}
}
