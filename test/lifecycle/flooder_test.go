package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// floodWorkers are the flood's connections, each saying one Hello at a
// time: enough for floodRate while the broker answers within 150 ms.
const floodWorkers = 32

// flood is a stranger's Hellos for a handler's name, floodRate a second
// until its context ends, and floodIdle connections of the same identity
// whose streams never say Hello. It counts the broker's answers.
type flood struct {
	// half is closed once half of the Hellos were sent.
	half chan struct{}
	wg   sync.WaitGroup

	mu sync.Mutex
	// answers are the Hellos' answers by status code (OK: welcomed), idle
	// how the idle streams ended; unsent counts the ticks when every worker
	// still waited for an answer.
	answers, idle map[codes.Code]int
	sent, unsent  int
}

// startFlood starts the flood on s's broker as token's identity, Hellos
// for handler; it runs until ctx ends.
func startFlood(ctx context.Context, t *testing.T, s *secure, token, handler string) *flood {
	t.Helper()
	f := &flood{half: make(chan struct{}), answers: map[codes.Code]int{}, idle: map[codes.Code]int{}}
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	dial := func() tetherv1.BrokerServiceClient {
		// Reconnect as quickly as the SDKs do, so that the flood resumes
		// at once when the broker is back.
		conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(credentials.NewTLS(s.clientTLS)),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
				BaseDelay: 50 * time.Millisecond, Multiplier: 1.6, MaxDelay: 500 * time.Millisecond}}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return tetherv1.NewBrokerServiceClient(conn)
	}
	jobs := make(chan *tetherv1.Hello)
	for range floodWorkers {
		client := dial()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for h := range jobs {
				f.count(f.answers, strangerHello(ctx, client, h))
			}
		}()
	}
	for range floodIdle {
		client := dial()
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			for ctx.Err() == nil {
				f.count(f.idle, idleStream(ctx, client))
			}
		}()
	}
	go f.tick(ctx, jobs, handler, s.ns)
	return f
}

// tick hands a worker a Hello floodRate times a second until ctx ends.
func (f *flood) tick(ctx context.Context, jobs chan<- *tetherv1.Hello, handler, ns string) {
	defer close(jobs)
	tk := time.NewTicker(time.Second / floodRate)
	defer tk.Stop()
	total := int(floodFor.Seconds()) * floodRate
	widgetsRes := &tetherv1.Resource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tk.C:
		}
		h := &tetherv1.Hello{Handler: handler, InstanceId: fmt.Sprint("flood-", i), Bindings: []*tetherv1.Binding{{
			Id: "delete", Kind: tetherv1.BindingKind_BINDING_KIND_DELETE, Namespaces: []string{ns}, Resource: widgetsRes}}}
		select {
		case jobs <- h:
			f.mu.Lock()
			f.sent++
			f.mu.Unlock()
		default:
			f.mu.Lock()
			f.unsent++
			f.mu.Unlock()
		}
		if i == total/2 {
			close(f.half)
		}
	}
}

// strangerHello says h on a stream of its own and returns the broker's
// answer: OK for a Welcome.
func strangerHello(ctx context.Context, client tetherv1.BrokerServiceClient, h *tetherv1.Hello) codes.Code {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	stream, err := client.Connect(ctx)
	if err != nil {
		return status.Code(err)
	}
	if err := stream.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: h}}); err != nil {
		_, err = stream.Recv() // the status the stream ended with
		return status.Code(err)
	}
	msg, err := stream.Recv()
	if err != nil {
		return status.Code(err)
	}
	if msg.GetWelcome() == nil {
		return codes.Unknown
	}
	return codes.OK
}

// idleStream opens a stream that never says Hello and returns how it ended. It
// waits for the connection, so that a broker down is not a busy loop.
func idleStream(ctx context.Context, client tetherv1.BrokerServiceClient) codes.Code {
	stream, err := client.Connect(ctx, grpc.WaitForReady(true))
	if err != nil {
		return status.Code(err)
	}
	_, err = stream.Recv()
	if ctx.Err() != nil {
		return codes.Canceled
	}
	return status.Code(err)
}

func (f *flood) count(m map[codes.Code]int, c codes.Code) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m[c]++
}

// wait waits for the workers and idle streams to end.
func (f *flood) wait() { f.wg.Wait() }

// report logs what was sent and answered, and fails the test if the
// stranger was ever welcomed.
func (f *flood) report(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	t.Logf("the flood sent %d Hellos in %v (%d ticks found every worker waiting); answers: %s; idle streams ended: %s",
		f.sent, floodFor, f.unsent, codeCounts(f.answers), codeCounts(f.idle))
	if n := f.answers[codes.OK]; n > 0 {
		t.Errorf("the stranger was welcomed %d times as a handler it is not granted", n)
	}
}

func codeCounts(m map[codes.Code]int) string {
	out := ""
	for _, c := range slices.Sorted(maps.Keys(m)) {
		out += fmt.Sprintf(" %v=%d", c, m[c])
	}
	return out
}
