// Package timerstats holds the JSON files the timer benchmark (go run
// ./test/bench -timers) and its handler process (test/bench/timerhandler)
// exchange, so that both sides read and write the same format:
//
//   - Progress: the handler rewrites it every second (-stats); the bench
//     waits on it for the warm-up.
//   - Window: the bench writes it (-window-file) before it stops the
//     handler with SIGTERM.
//   - Summary: the handler writes it (-summary) on exit, with the ticks due
//     inside the Window as WindowStats.
package timerstats
