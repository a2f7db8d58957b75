package main

import (
	"context"
	"fmt"
	"time"
)

// report is what the kit found, also written as JSON.
type report struct {
	Command []string `json:"command"`
	// SDK is Hello.sdk of the handler under test.
	SDK     string   `json:"sdk"`
	Results []result `json:"results"`
	Passed  bool     `json:"passed"`
}

// result is one rule's verdict.
type result struct {
	Rule    string  `json:"rule"`
	Check   string  `json:"check"`
	Pass    bool    `json:"pass"`
	Detail  string  `json:"detail,omitempty"`
	Seconds float64 `json:"seconds"`
}

// play runs every scenario in order and prints a line per rule.
func (k *kit) play(ctx context.Context) *report {
	r := &report{Command: k.opts.command, Passed: true}
	for _, sc := range scenarios {
		start := time.Now()
		err := sc.run(k, ctx)
		res := result{Rule: sc.rule, Check: sc.check, Pass: err == nil, Seconds: time.Since(start).Round(time.Millisecond).Seconds()}
		verdict := "PASS"
		if err != nil {
			res.Detail, verdict, r.Passed = err.Error(), "FAIL", false
		}
		fmt.Fprintf(k.opts.progress, "%s %-17s %s (%.1fs)\n", verdict, sc.rule, sc.check, res.Seconds)
		if err != nil {
			fmt.Fprintf(k.opts.progress, "     %s\n", err)
		}
		r.Results = append(r.Results, res)
		if ctx.Err() != nil {
			break
		}
	}
	if h := k.firstHello(); h != nil {
		r.SDK = h.GetSdk()
	}
	return r
}
