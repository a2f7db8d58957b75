package incluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/tether-dev/tether/test/controlplane"
	"github.com/tether-dev/tether/test/node"
	"github.com/tether-dev/tether/test/ociimage"
	"github.com/tether-dev/tether/test/testenv"
)

// The seed's operator (testdata/gadgets): a chart with the CRD of Gadgets,
// one Gadget named "first", and the handler "gadgets" whose timer holds it.
const (
	gadgetsChart = "test/incluster/testdata/gadgets"
	gadgetsCRD   = "gadgets.seed.tether.dev"
	gadgetsHold  = "tether.dev/gadgets"
	gadgetName   = "first"
	tickedLabel  = "seed.tether.dev/ticked" // the timer handler's TickedLabel
	timerImage   = "tether-timer:dev"
)

var gadgetsGVR = schema.GroupVersionResource{Group: "seed.tether.dev", Version: "v1", Resource: "gadgets"}

// timerImageImported makes sure the node has the image of the timer handler
// (./test/incluster/timerhandler), built and imported once per test binary.
var timerImageImported struct {
	once sync.Once
	err  error
}

func importTimerImage(t *testing.T, c *node.Cluster) {
	t.Helper()
	timerImageImported.once.Do(func() {
		timerImageImported.err = func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
			defer cancel()
			bins, err := ociimage.Binaries(ctx, repoRoot(t), runtime.GOARCH, "./test/incluster/timerhandler")
			if err != nil {
				return err
			}
			img, err := ociimage.Build(ociimage.Image{Files: bins, Entrypoint: []string{"/timerhandler"},
				Title: "tether-timer", CreatedBy: "test/incluster: the seed's timer handler", Arch: runtime.GOARCH})
			if err != nil {
				return err
			}
			dir, err := os.MkdirTemp("", "tether-timer-image-")
			if err != nil {
				return err
			}
			defer os.RemoveAll(dir)
			tarball := filepath.Join(dir, "timer.tar")
			if err := ociimage.WriteTarball(tarball, timerImage, img); err != nil {
				return err
			}
			return c.ImportImage(ctx, tarball)
		}()
	})
	if timerImageImported.err != nil {
		t.Fatalf("the image %s: %v", timerImage, timerImageImported.err)
	}
}

// helm runs the cached helm (built first if need be) against the cluster in
// the repository root.
func helm(t *testing.T, c *node.Cluster, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute) // a first build of helm included
	defer cancel()
	out, err := controlplane.Helm{Dir: repoRoot(t), Home: t.TempDir(), Kubeconfig: c.KubeconfigPath(), Progress: os.Stderr}.Run(ctx, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// installGadgets installs the seed's operator as the release "gadgets" in
// namespace ns, with the CA the broker publishes, and waits until its timer
// has ticked on the Gadget and the broker holds it. The broker must be
// installed.
func installGadgets(t *testing.T, c *node.Cluster, ns string) {
	t.Helper()
	importTimerImage(t, c)
	cm, err := c.Client().CoreV1().ConfigMaps(tetherNS).Get(context.Background(), "tether-broker-ca", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the broker's CA: %v", err)
	}
	ca := filepath.Join(t.TempDir(), "ca.crt")
	if err := os.WriteFile(ca, []byte(cm.Data["ca.crt"]), 0o600); err != nil {
		t.Fatal(err)
	}
	helm(t, c, "install", "gadgets", gadgetsChart, "--namespace", ns, "--create-namespace",
		"--set", "brokerNamespace="+tetherNS, "--set-file", "brokerCA="+ca)
	dyn := c.Dynamic(t)
	testenv.WaitFor(t, 2*time.Minute, "the gadgets timer to tick on "+ns+"/"+gadgetName+" and hold it", func(ctx context.Context) error {
		g, err := dyn.Resource(gadgetsGVR).Namespace(ns).Get(ctx, gadgetName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if g.GetLabels()[tickedLabel] != "true" || !slices.Contains(g.GetFinalizers(), gadgetsHold) {
			return fmt.Errorf("labels %v, finalizers %v", g.GetLabels(), g.GetFinalizers())
		}
		return nil
	})
}

// gadgetsLeft is nil when the CRD of Gadgets is gone, and with it every
// Gadget: a CRD's deletion waits for its objects', so a Gadget that kept a
// hold would keep the CRD.
func gadgetsLeft(ctx context.Context, dyn dynamic.Interface) error {
	crd, err := dyn.Resource(controlplane.CRDGVR).Get(ctx, gadgetsCRD, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	deleting := crd.GetDeletionTimestamp() != nil
	list, err := dyn.Resource(gadgetsGVR).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("the CRD %s is left (deleting: %v); listing its objects: %w", gadgetsCRD, deleting, err)
	}
	var left []string
	for _, g := range list.Items {
		left = append(left, fmt.Sprintf("%s/%s %v", g.GetNamespace(), g.GetName(), g.GetFinalizers()))
	}
	return fmt.Errorf("the CRD %s is left (deleting: %v), with gadgets [%s]", gadgetsCRD, deleting, strings.Join(left, ", "))
}
