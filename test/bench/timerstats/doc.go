// Package timerstats holds what the timer benchmark (go run ./test/bench
// -timers) and its handler processes share: the JSON files they exchange,
// so that both sides read and write the same format, and the one
// computation of the measurement, Summarize.
//
//   - Progress: a handler rewrites it every second (-stats); the bench
//     waits on it for the warm-up.
//   - Window: the bench writes it (-window-file) before it stops the Go
//     handler (test/bench/timerhandler) with SIGTERM.
//   - Summary: the Go handler writes it (-summary) on exit, with the ticks
//     due inside the Window as WindowStats, computed by Summarize.
//   - Ticks: every tick a handler received. The Python handler
//     (test/bench/timerhandler/handler.py) writes them on exit (--ticks)
//     instead of a summary, and the bench applies the same Summarize.
package timerstats
