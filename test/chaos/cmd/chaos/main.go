// Command chaos plays one seed of random faults against the real control
// plane, two broker replicas and three handler instances, checks the
// history against the contract (its rules numbered as in docs/design.md),
// and prints one table. It exits 1 when a rule was broken, 2 when the run
// itself failed.
//
//	go run ./test/chaos/cmd/chaos -seed 7 -duration 10m
//
// A failing seed is reproduced with the same -seed and -duration (`make
// chaos SEED=7`).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tether-dev/tether/test/chaos"
)

func main() {
	var o chaos.Options
	flag.Int64Var(&o.Seed, "seed", 1, "the seed of the fault schedule and the load")
	flag.DurationVar(&o.Duration, "duration", 10*time.Minute, "how long the load runs and faults are injected")
	flag.DurationVar(&o.Grace, "grace", 5*time.Second, "the handler's grace")
	flag.DurationVar(&o.Bound, "bound", 30*time.Second, "how long after the load stops (and a grace) everything must have settled")
	flag.IntVar(&o.Rate, "rate", 10, "the load's writes per second")
	flag.StringVar(&o.Dir, "dir", "", "folder for the processes' logs (default: a new temporary folder, printed)")
	flag.BoolVar(&o.Race, "race", false, "build the broker with the race detector")
	brokerFlags := flag.String("broker-flags", "", "extra flags for every broker, space-separated")
	historyFile := flag.String("history", "", "write the run's history to this file as JSON, for a closer look")
	flag.StringVar(&o.Break, "break", "", "build the broker to break the contract this way (broker/dispatch/breakage.go), for the checker's self-test")
	judge := flag.String("judge", "", "judge the history in this file (from -history) instead of running: after a change to the checker")
	expect := flag.Int("expect", 0, "with -break: exit 0 only when the checker reports a breach of this rule of docs/design.md (2-7), else 1")
	flag.Parse()
	o.BrokerFlags = strings.Fields(*brokerFlags)
	o.Progress = os.Stderr

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var h *chaos.History
	var err error
	if *judge != "" {
		h, err = readHistory(*judge)
	} else {
		h, err = chaos.Run(ctx, o)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
		os.Exit(2)
	}
	if *historyFile != "" {
		if err := writeHistory(*historyFile, h); err != nil {
			fmt.Fprintf(os.Stderr, "chaos: %v\n", err)
			os.Exit(2)
		}
	}
	vs := chaos.Check(h)
	chaos.Report(os.Stdout, h, chaos.Summarize(h), vs)
	if *expect != 0 {
		if !slices.ContainsFunc(vs, func(v chaos.Violation) bool { return v.Rule == *expect }) {
			fmt.Fprintf(os.Stderr, "chaos: -break %s: the checker did not report rule %d\n", o.Break, *expect)
			os.Exit(1)
		}
		fmt.Fprintf(os.Stderr, "chaos: -break %s: the checker reported rule %d, as it should\n", o.Break, *expect)
		return
	}
	if len(vs) > 0 {
		os.Exit(1)
	}
}

func writeHistory(path string, h *chaos.History) error {
	data, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return fmt.Errorf("encoding the history: %w", err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("writing the history: %w", err)
	}
	return nil
}

func readHistory(path string) (*chaos.History, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the history: %w", err)
	}
	var h chaos.History
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("decoding the history in %s: %w", path, err)
	}
	return &h, nil
}
