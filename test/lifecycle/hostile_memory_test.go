package lifecycle

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
	"github.com/tether-dev/tether/sdk"
	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/gobin"
)

// hostileGrowthLimit is the stated bound on what a hostile handler can make
// the broker's peak memory grow by, over the same broker serving a
// well-behaved handler, measured in the same run.
const hostileGrowthLimit = 160 << 20

// vm reads a VmHWM or VmRSS line of /proc/pid/status, in bytes.
func vm(t *testing.T, pid int, field string) int64 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// TestHostileHandlerMemoryIsBounded plays a connected handler that does
// everything the protocol lets it: floods of DaemonExited and FlowControl,
// answers just under the message limit for deliveries that do not exist,
// more instances than the broker takes, and Hellos with as many namespaces
// as allowed. The broker (built without the race detector) must stay up,
// keep serving a well-behaved handler, and its peak RSS grow by less than
// hostileGrowthLimit over its peak with that handler alone.
func TestHostileHandlerMemoryIsBounded(t *testing.T) {
	cp := controlplane.Get(t)
	dyn := cp.EnsureWidgetCRD(t)
	ns, brokerNS := cp.Namespace(t), cp.Namespace(t)
	addr := freeAddr(t)
	b := startBrokerBinary(t, gobin.Build(t, "github.com/tether-dev/tether/cmd/broker"), cp, addr, brokerNS)
	pid := b.cmd.Process.Pid

	var j journal
	good := sdk.New("good", handlerOpts(t)...)
	good.OnCreate(widgets, j.record(nil), sdk.Namespaces(ns))
	runHandler(t, good, addr)
	w := create(t, dyn, widgetGVR, widget(ns, "w", nil))
	j.waitCount(t, sdk.Create, "w", 1)
	baseline := vm(t, pid, "VmHWM")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	widgetsRes := &tetherv1.Resource{Group: "test.tether.dev", Version: "v1", Resource: "widgets"}
	// open says hello on a connection of its own, as SDKs do (the broker
	// takes few streams per connection), and returns the stream once
	// welcomed, or the error.
	open := func(h *tetherv1.Hello) (tetherv1.BrokerService_ConnectClient, error) {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(8<<20)))
		if err != nil {
			return nil, err
		}
		context.AfterFunc(ctx, func() { conn.Close() })
		stream, err := tetherv1.NewBrokerServiceClient(conn).Connect(ctx)
		if err != nil {
			return nil, err
		}
		if err := stream.Send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Hello{Hello: h}}); err != nil {
			return nil, err
		}
		msg, err := stream.Recv()
		if err != nil {
			return nil, err
		}
		if msg.GetWelcome() == nil {
			return nil, fmt.Errorf("got %v, want welcome", msg)
		}
		return stream, nil
	}

	// One instance with a daemon on w, flooding.
	flood, err := open(&tetherv1.Hello{Handler: "hostile", InstanceId: "flood", Window: 1024, Bindings: []*tetherv1.Binding{{
		Id: "d", Kind: tetherv1.BindingKind_BINDING_KIND_DAEMON, Namespaces: []string{ns}, Resource: widgetsRes,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	go func() { // the broker's messages are read and dropped
		for {
			if _, err := flood.Recv(); err != nil {
				return
			}
		}
	}()
	send := func(m *tetherv1.ConnectRequest) {
		if err := flood.Send(m); err != nil {
			t.Fatalf("flooding: %v", err)
		}
	}
	for i := range 200000 {
		uid := string(w.GetUID())
		if i%2 == 1 {
			uid = fmt.Sprint("made-up-", i)
		}
		send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_DaemonExited{DaemonExited: &tetherv1.DaemonExited{
			BindingId: "d", Uid: uid, Failed: true, Message: strings.Repeat("e", 512)}}})
		if i%2 == 0 {
			send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_FlowControl{FlowControl: &tetherv1.FlowControl{Window: uint32(1 + i%1024)}}})
		}
	}
	big := strings.Repeat("x", tetherv1.DefaultMaxMessageBytes-1024)
	for i := range 64 {
		send(&tetherv1.ConnectRequest{Message: &tetherv1.ConnectRequest_Ack{Ack: &tetherv1.Ack{
			DeliveryId: fmt.Sprint("no-such-delivery-", i), Outcome: tetherv1.Outcome_OUTCOME_FAIL, Message: big}}})
	}

	phase := func(what string) {
		t.Logf("after %s: peak RSS %.1f MiB", what, float64(vm(t, pid, "VmHWM"))/(1<<20))
	}
	phase("the floods and the oversized answers")

	// More instances than the broker takes, each with a window of 1024.
	var mu sync.Mutex
	var welcomed, refused int
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := open(&tetherv1.Hello{Handler: "hostile", InstanceId: fmt.Sprint("i-", i), Window: 1024, Bindings: []*tetherv1.Binding{{
				Id: "d", Kind: tetherv1.BindingKind_BINDING_KIND_DAEMON, Namespaces: []string{ns}, Resource: widgetsRes,
			}}})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				welcomed++
			case status.Code(err) == codes.ResourceExhausted:
				refused++
			default:
				t.Errorf("instance %d: %v", i, err)
			}
		}()
	}
	wg.Wait()
	if welcomed != 255 || refused != 45 {
		t.Errorf("%d more instances welcomed and %d refused, want 255 and 45 (256 at most)", welcomed, refused)
	}

	phase("300 instances")

	// Hellos with as many namespaces as a Hello may name.
	for h := range 4 {
		hello := &tetherv1.Hello{Handler: fmt.Sprint("wide-", h), InstanceId: "i"}
		for bi := range tetherv1.MaxHelloNamespaces / tetherv1.MaxNamespaces {
			b := &tetherv1.Binding{Id: fmt.Sprint("b", bi), Kind: tetherv1.BindingKind_BINDING_KIND_CREATE, Resource: widgetsRes}
			for n := range tetherv1.MaxNamespaces {
				b.Namespaces = append(b.Namespaces, fmt.Sprintf("wide-%d-%d", bi, n))
			}
			hello.Bindings = append(hello.Bindings, b)
		}
		if _, err := open(hello); err != nil {
			t.Fatalf("a Hello with %d namespaces: %v", tetherv1.MaxHelloNamespaces, err)
		}
	}

	phase("4 Hellos of 500 namespaces")

	// The broker still serves the good handler.
	create(t, dyn, widgetGVR, widget(ns, "after", nil))
	j.waitCount(t, sdk.Create, "after", 1)
	peak := vm(t, pid, "VmHWM")
	t.Logf("broker peak RSS: %.1f MiB with a good handler, %.1f MiB after the hostile one (+%.1f MiB; limit +%d MiB)",
		float64(baseline)/(1<<20), float64(peak)/(1<<20), float64(peak-baseline)/(1<<20), hostileGrowthLimit>>20)
	if peak-baseline > hostileGrowthLimit {
		t.Errorf("the hostile handler grew the broker's peak RSS by %.1f MiB, more than %d MiB", float64(peak-baseline)/(1<<20), hostileGrowthLimit>>20)
	}
}
