package lifecycle

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tether-dev/tether/test/controlplane"
)

// createWidgets creates n widgets named w-0000... from 16 goroutines.
func createWidgets(t testing.TB, cp *controlplane.ControlPlane, ns string, n int) {
	t.Helper()
	dyn := cp.Dynamic(t)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	next := make(chan int)
	for range 16 {
		wg.Go(func() {
			for i := range next {
				w := widget(ns, fmt.Sprintf("w-%04d", i), map[string]any{"size": int64(i)})
				if _, err := dyn.Resource(widgetGVR).Namespace(ns).Create(context.Background(), w, metav1.CreateOptions{}); err != nil {
					errs <- err
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("creating widgets: %v", err)
	}
}

// span is one handling of one object by one instance.
type span struct {
	instance   int
	start, end int64 // unix nanoseconds; end is the kill time if it never ended
}

// spans collects START/END lines per object from every process.
func spans(procs []*handlerProcess, killedAt map[int]int64) map[string][]span {
	out := map[string][]span{}
	for i, p := range procs {
		open := map[string]int64{}
		for _, l := range p.out.All() {
			f := strings.Fields(l)
			if len(f) != 3 {
				continue
			}
			ts, _ := strconv.ParseInt(f[2], 10, 64)
			switch f[0] {
			case "START":
				open[f[1]] = ts
			case "END":
				out[f[1]] = append(out[f[1]], span{instance: i, start: open[f[1]], end: ts})
				delete(open, f[1])
			}
		}
		for uid, start := range open {
			end, killed := killedAt[i]
			if !killed {
				end = time.Now().UnixNano()
			}
			out[uid] = append(out[uid], span{instance: i, start: start, end: end})
		}
	}
	return out
}

// overlaps lists objects that two instances handled at the same time.
func overlaps(all map[string][]span) []string {
	var bad []string
	for uid, ss := range all {
		sort.Slice(ss, func(i, j int) bool { return ss[i].start < ss[j].start })
		for i := 1; i < len(ss); i++ {
			if ss[i].instance != ss[i-1].instance && ss[i].start < ss[i-1].end {
				bad = append(bad, uid)
			}
		}
	}
	return bad
}

func creates(p *handlerProcess) int {
	return p.out.Count(func(l string) bool { return strings.HasPrefix(l, "CREATE ") })
}

// TestInstancesShareObjectsWithoutOverlap: three instances of one handler
// and 1000 objects: every object is handled, by exactly one instance at a
// time, and the load is spread within 2x of even.
func TestInstancesShareObjectsWithoutOverlap(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)
	var procs []*handlerProcess
	for i := range 3 {
		procs = append(procs, startHandlerProcess(t, addr, "shared", ns, "--instance", fmt.Sprintf("i%d", i)))
	}
	const n = 1000
	createWidgets(t, cp, ns, n)
	eventually(t, "every widget created-handled", func() bool {
		total := 0
		for _, p := range procs {
			total += creates(p)
		}
		return total >= n
	})
	var counts []int
	for _, p := range procs {
		counts = append(counts, creates(p))
	}
	t.Logf("creates per instance: %v", counts)
	even := n / len(procs)
	for i, c := range counts {
		if c < even/2 || c > 2*even {
			t.Errorf("instance %d handled %d objects; even is %d (want within 2x)", i, c, even)
		}
	}
	if bad := overlaps(spans(procs, nil)); len(bad) > 0 {
		t.Errorf("%d objects handled by two instances at once: %v", len(bad), bad[:min(5, len(bad))])
	}
}

// TestKilledInstanceObjectsMove: one of three slow instances is SIGKILLed
// while deliveries are in flight; its objects move to the others, every
// object is handled, and no object is ever handled by two at once.
func TestKilledInstanceObjectsMove(t *testing.T) {
	cp := controlplane.Get(t)
	cp.EnsureWidgetCRD(t)
	ns := cp.Namespace(t)
	addr := startBroker(t, cp)
	var procs []*handlerProcess
	for i := range 3 {
		procs = append(procs, startHandlerProcess(t, addr, "movers", ns, "--instance", fmt.Sprintf("m%d", i), "--delay", "20ms"))
	}
	const n = 300
	createWidgets(t, cp, ns, n)
	eventually(t, "the victim mid-way", func() bool { return creates(procs[0]) >= 10 })
	// SIGKILL ends the process at once: nothing it handles outlives this
	// moment, while the broker may hand its objects on before Wait returns.
	killedAt := map[int]int64{0: time.Now().UnixNano()}
	procs[0].kill()

	handled := func() map[string]bool {
		seen := map[string]bool{}
		for _, p := range procs {
			for _, l := range p.out.All() {
				if name, ok := strings.CutPrefix(l, "CREATE "+ns+"/"); ok {
					seen[name] = true
				}
			}
		}
		return seen
	}
	eventually(t, "every widget handled by someone", func() bool { return len(handled()) >= n })
	t.Logf("creates: killed %d, survivors %d and %d", creates(procs[0]), creates(procs[1]), creates(procs[2]))
	if bad := overlaps(spans(procs, killedAt)); len(bad) > 0 {
		t.Errorf("%d objects handled by two instances at once: %v", len(bad), bad[:min(5, len(bad))])
	}
}
