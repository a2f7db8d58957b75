// Command sdkpace measures an SDK's delivery path without a cluster: it is
// a broker that speaks only the Connect stream. For each -cmd (a shell
// command, {addr} replaced by the address sdkpace listens on) it starts the
// handler, sends it -n create deliveries of a Widget, then -n delete
// deliveries, never more than -window in flight, and prints the handler
// process's CPU time (user and system, all its threads) and the wall time
// per delivery. With several -cmd and -rounds, the commands run in turns,
// so that two trees compare on one machine at one time:
//
//	go run ./test/bench/sdkpace -n 4000 -rounds 3 \
//	  -cmd 'PYTHONPATH=sdk/python exec /usr/bin/python3 test/bench/handler/handler.py --addr {addr} --namespace bench' \
//	  -cmd 'exec go run ./test/bench/handler -addr {addr} -namespace bench'
//
// Its Welcome lists CAPABILITY_ACK_BATCH, and it takes a batch's acks as
// the broker does; each line says in how many messages the acks came. To a
// handler that lists CAPABILITY_DELIVERY_BATCH it sends the deliveries it
// has ready at once (one for each ack that came in together) as one
// DeliveryBatch, as the broker does; each line says in how many messages.
//
// With -rate, the deliveries go one at a time at that pace instead, as a
// cluster's changes come to a broker one by one: what a handler spends
// when nothing waits together.
//
// The handler must bind "create" (create) and "delete" (delete) on
// test.tether.dev/v1 widgets, as test/bench/handler and handler.py do. It
// ends with SIGTERM, so a profiler it runs under writes its profile:
//
//	-cmd 'cd sdk/python && exec /usr/bin/python3 -m cProfile -o /tmp/h.prof ../../test/bench/handler/handler.py --addr {addr} --namespace bench'

package main

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

type commands []string

func (c *commands) String() string     { return strings.Join(*c, "; ") }
func (c *commands) Set(v string) error { *c = append(*c, v); return nil }

func main() {
	var cmds commands
	flag.Var(&cmds, "cmd", "shell command of a handler, {addr} the broker's address (repeatable: run in turns)")
	n := flag.Int("n", 4000, "Widgets: n creates, then n deletes")
	window := flag.Int("window", 64, "deliveries in flight at most")
	rounds := flag.Int("rounds", 3, "rounds of every -cmd, in turns")
	linger := flag.Duration("linger", 0, "with -rate, hold a ready delivery this long for the ones due meanwhile, sent with it")
	rate := flag.Float64("rate", 0, "deliveries a `second`, sent one at a time at that pace (0: as fast as the window frees)")
	flag.Parse()
	if len(cmds) == 0 {
		fmt.Fprintln(os.Stderr, "sdkpace: at least one -cmd")
		os.Exit(2)
	}
	for r := 1; r <= *rounds; r++ {
		for i, c := range cmds {
			res, err := run(c, *n, *window, *rate, *linger)
			if err != nil {
				fmt.Fprintf(os.Stderr, "sdkpace: cmd %d: %v\n", i+1, err)
				os.Exit(1)
			}
			fmt.Printf("round %d cmd %d: %s, load %s\n", r, i+1, res, loadAverage())
		}
	}
}

// result is one run's figures.
type result struct {
	deliveries int
	// ackMessages are the messages that carried the acks: fewer than
	// deliveries when the handler sends AckBatch.
	ackMessages int
	// deliveryMessages are the messages that carried the deliveries:
	// fewer than deliveries when the handler takes DeliveryBatch.
	deliveryMessages int
	cpu, wall        time.Duration
}

func (r result) String() string {
	per := func(d time.Duration) float64 { return float64(d.Microseconds()) / float64(r.deliveries) }
	return fmt.Sprintf("%d deliveries (in %d messages, acks in %d): CPU %.1f µs/delivery, wall %.1f µs/delivery",
		r.deliveries, r.deliveryMessages, r.ackMessages, per(r.cpu), per(r.wall))
}

// run serves one handler process through n creates and n deletes.
func run(command string, n, window int, rate float64, linger time.Duration) (result, error) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return result{}, fmt.Errorf("listening: %w", err)
	}
	srv := grpc.NewServer()
	b := &broker{n: n, window: window, rate: rate, linger: linger, done: make(chan result, 1), errs: make(chan error, 1)}
	tetherv1.RegisterBrokerServiceServer(srv, b)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	cmd := exec.Command("sh", "-c", strings.ReplaceAll(command, "{addr}", lis.Addr().String()))
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return result{}, fmt.Errorf("starting the handler: %w", err)
	}
	b.pid = cmd.Process.Pid
	defer stop(cmd)
	select {
	case r := <-b.done:
		return r, nil
	case err := <-b.errs:
		return result{}, err
	case <-time.After(5 * time.Minute):
		return result{}, errors.New("timed out after 5m")
	}
}

// stop ends the handler as a pod's is ended: SIGTERM (so that a profiler
// it runs under writes its profile), SIGKILL after 10s.
func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
}

// broker is the one Connect stream a run serves.
type broker struct {
	tetherv1.UnimplementedBrokerServiceServer
	n, window int
	rate      float64 // -rate, 0 for none
	linger    time.Duration
	pid       int
	done      chan result
	errs      chan error
}

func (b *broker) Connect(stream tetherv1.BrokerService_ConnectServer) error {
	err := b.serve(stream)
	if err != nil {
		b.errs <- err
	}
	return err
}

func (b *broker) serve(stream tetherv1.BrokerService_ConnectServer) error {
	hello, err := stream.Recv()
	if err != nil {
		return fmt.Errorf("reading Hello: %w", err)
	}
	batching := slices.Contains(hello.GetHello().GetCapabilities(), tetherv1.Capability_CAPABILITY_DELIVERY_BATCH)
	err = stream.Send(&tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Welcome{Welcome: &tetherv1.Welcome{
		SessionId: "sdkpace", Window: uint32(b.window), Capabilities: []tetherv1.Capability{
			tetherv1.Capability_CAPABILITY_CAPABILITIES, tetherv1.Capability_CAPABILITY_HANDLER_EVENTS,
			tetherv1.Capability_CAPABILITY_ACK_BATCH, tetherv1.Capability_CAPABILITY_DELIVERY_BATCH}}}})
	if err != nil {
		return fmt.Errorf("sending Welcome: %w", err)
	}
	acks := make(chan error, b.window)
	var ackMessages atomic.Int64
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				acks <- fmt.Errorf("reading acks: %w", err)
				return
			}
			// A batch is its acks one by one, as the broker takes it.
			batch := msg.GetAckBatch().GetAcks()
			if a := msg.GetAck(); a != nil {
				batch = []*tetherv1.Ack{a}
			}
			if len(batch) > 0 {
				ackMessages.Add(1) // before its acks: counted when the last ack is
			}
			for _, a := range batch {
				if a.GetOutcome() != tetherv1.Outcome_OUTCOME_OK {
					acks <- fmt.Errorf("delivery %s: outcome %s: %s", a.GetDeliveryId(), a.GetOutcome(), a.GetMessage())
					return
				}
				acks <- nil
			}
		}
	}()
	total := 2 * b.n
	cpu0, err := cpuTime(b.pid)
	if err != nil {
		return err
	}
	start := time.Now()
	sent, acked, messages := 0, 0, 0
	for acked < total {
		if b.linger > 0 && sent < total && sent-acked < b.window && b.rate > 0 && b.due(sent, start) {
			time.Sleep(time.Until(b.at(sent, start).Add(b.linger))) // pacing the sends, as -linger says
		}
		var ready []*tetherv1.Delivery
		for ; sent < total && sent-acked < b.window && b.due(sent, start); sent++ {
			ready = append(ready, delivery(sent, b.n))
		}
		n, err := send(stream, ready, batching)
		if err != nil {
			return err
		}
		messages += n
		// An ack, or with -rate the next delivery's time if a slot is free.
		var next <-chan time.Time
		if b.rate > 0 && sent < total && sent-acked < b.window {
			next = time.After(time.Until(b.at(sent, start)))
		}
		select {
		case err := <-acks:
			if err != nil {
				return err
			}
			acked++
		case <-next:
		}
		// The acks that came in together free their slots together.
		for ; len(acks) > 0; acked++ {
			if err := <-acks; err != nil {
				return err
			}
		}
	}
	wall := time.Since(start)
	cpu1, err := cpuTime(b.pid)
	if err != nil {
		return err
	}
	b.done <- result{deliveries: total, ackMessages: int(ackMessages.Load()), deliveryMessages: messages, cpu: cpu1 - cpu0, wall: wall}
	return nil
}

// at is when the i-th delivery is due with -rate.
func (b *broker) at(i int, start time.Time) time.Time {
	return start.Add(time.Duration(float64(i) / b.rate * float64(time.Second)))
}

// due says whether the i-th delivery may go now: always without -rate.
func (b *broker) due(i int, start time.Time) bool {
	return b.rate == 0 || !time.Now().Before(b.at(i, start))
}

// send sends ds, one message each, or as one DeliveryBatch when batching,
// and says in how many messages.
func send(stream tetherv1.BrokerService_ConnectServer, ds []*tetherv1.Delivery, batching bool) (int, error) {
	var msgs []*tetherv1.ConnectResponse
	if batching && len(ds) > 1 {
		msgs = append(msgs, &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_DeliveryBatch{
			DeliveryBatch: &tetherv1.DeliveryBatch{Deliveries: ds}}})
	} else {
		for _, d := range ds {
			msgs = append(msgs, &tetherv1.ConnectResponse{Message: &tetherv1.ConnectResponse_Delivery{Delivery: d}})
		}
	}
	for _, m := range msgs {
		if err := stream.Send(m); err != nil {
			return 0, fmt.Errorf("sending deliveries: %w", err)
		}
	}
	return len(msgs), nil
}

// delivery is the i-th of 2n: creates, then deletes, of Widgets w-<i mod n>.
func delivery(i, n int) *tetherv1.Delivery {
	kind, binding := tetherv1.DeliveryKind_DELIVERY_KIND_CREATE, "create"
	if i >= n {
		kind, binding = tetherv1.DeliveryKind_DELIVERY_KIND_DELETE, "delete"
	}
	name := fmt.Sprintf("w-%05d", i%n)
	uid := fmt.Sprintf("00000000-0000-4000-8000-%012d", i%n)
	obj := `{"apiVersion":"test.tether.dev/v1","kind":"Widget","metadata":{"name":"` + name +
		`","namespace":"bench","uid":"` + uid + `","resourceVersion":"` + strconv.Itoa(1000+i) +
		`","generation":1,"creationTimestamp":"2026-01-01T00:00:00Z","finalizers":["tether.dev/bench"]},"spec":{"size":3}}`
	return &tetherv1.Delivery{
		Id: "d" + strconv.Itoa(i), BindingId: binding, Kind: kind, Attempt: 1,
		Ref: &tetherv1.ObjectRef{
			Resource:  &tetherv1.Resource{Group: "test.tether.dev", Version: "v1", Resource: "widgets", Kind: "Widget"},
			Namespace: "bench", Name: name, Uid: uid, ResourceVersion: strconv.Itoa(1000 + i),
		},
		Object: []byte(obj),
	}
}

// cpuTime is the CPU time process pid used so far, user and system, all
// its threads, from /proc/<pid>/stat.
func cpuTime(pid int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, fmt.Errorf("reading the handler's CPU time: %w", err)
	}
	s := string(data)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	var ticks int64
	for _, field := range f[11:13] { // utime, stime
		v, err := strconv.ParseInt(field, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("reading the handler's CPU time: %w", err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(data))
	return strings.Join(f[:min(3, len(f))], " ")
}
