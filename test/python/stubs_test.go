package pyhandler

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/types/descriptorpb"

	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

const staleHint = "the Python stubs in sdk/python/tether/v1 are stale relative to proto/tether/v1/broker.proto: " +
	"run make proto-python (test/python/gen.sh) and commit them"

// stubs are the generated files, under the SDK's folder.
var stubs = []string{"tether/v1/broker_pb2.py", "tether/v1/broker_pb2_grpc.py"}

// TestStubsMatchTheGoCode compares the descriptor compiled into the
// committed broker_pb2.py with the one in the Go package generated from the
// same proto file. It needs only python3 and python3-protobuf, so it
// catches a proto change without regenerated Python stubs even where
// protoc is not installed.
func TestStubsMatchTheGoCode(t *testing.T) {
	needPython(t)
	gen, err := filepath.Abs(sdkDir)
	if err != nil {
		t.Fatal(err)
	}
	const prog = `import sys
sys.path.insert(0, sys.argv[1])
from tether.v1 import broker_pb2
sys.stdout.buffer.write(broker_pb2.DESCRIPTOR.serialized_pb)`
	cmd := exec.Command(python, "-I", "-B", "-c", prog, gen)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	raw, err := cmd.Output()
	if err != nil {
		t.Fatalf("loading the stubs: %v\n%s", err, stderr.Bytes())
	}
	got := &descriptorpb.FileDescriptorProto{}
	if err := proto.Unmarshal(raw, got); err != nil {
		t.Fatalf("decoding the descriptor in broker_pb2.py: %v", err)
	}
	want := protodesc.ToFileDescriptorProto(tetherv1.File_tether_v1_broker_proto)
	normalize(got)
	normalize(want)
	if !proto.Equal(got, want) {
		t.Fatalf("%s (the descriptors differ in: %v)", staleHint, differences(got, want))
	}
}

// TestStubsAreWhatGenShWrites regenerates the stubs into a temporary
// directory and compares them byte for byte with the committed ones. It
// skips when the pinned toolchain (protoc 3.21.12, grpc_python_plugin
// 1.51.1: Debian's protobuf-compiler and protobuf-compiler-grpc) is not
// installed, since another protoc writes different code for the same proto.
func TestStubsAreWhatGenShWrites(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash to run gen.sh")
	}
	out := t.TempDir()
	cmd := exec.Command("bash", "gen.sh", out)
	var log bytes.Buffer
	cmd.Stdout = &log
	cmd.Stderr = &log
	err := cmd.Run()
	if exit := (*exec.ExitError)(nil); errors.As(err, &exit) && exit.ExitCode() == 3 {
		t.Skipf("cannot regenerate the stubs with the pinned toolchain, so their staleness against proto/ is not checked here:\n%s", log.Bytes())
	}
	if err != nil {
		t.Fatalf("gen.sh: %v\n%s", err, log.Bytes())
	}
	t.Logf("%s", bytes.TrimSpace(log.Bytes()))

	for _, name := range stubs {
		a, err := os.ReadFile(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(sdkDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("%s: %s differs", staleHint, name)
		}
	}
}

// normalize drops what differs between code generators for the same proto
// file: source info and the json_name that only some of them record.
func normalize(f *descriptorpb.FileDescriptorProto) {
	f.SourceCodeInfo = nil
	var walk func([]*descriptorpb.DescriptorProto)
	walk = func(msgs []*descriptorpb.DescriptorProto) {
		for _, m := range msgs {
			for _, field := range m.GetField() {
				field.JsonName = nil
			}
			walk(m.GetNestedType())
		}
	}
	walk(f.GetMessageType())
}

// differences names the top-level messages, enums and services that differ.
func differences(got, want *descriptorpb.FileDescriptorProto) []string {
	index := func(f *descriptorpb.FileDescriptorProto) map[string]proto.Message {
		m := map[string]proto.Message{}
		for _, x := range f.GetMessageType() {
			m["message "+x.GetName()] = x
		}
		for _, x := range f.GetEnumType() {
			m["enum "+x.GetName()] = x
		}
		for _, x := range f.GetService() {
			m["service "+x.GetName()] = x
		}
		return m
	}
	g, w := index(got), index(want)
	var out []string
	for name, wx := range w {
		switch gx, ok := g[name]; {
		case !ok:
			out = append(out, name+" (missing from the stubs)")
		case !proto.Equal(gx, wx):
			out = append(out, name)
		}
	}
	for name := range g {
		if _, ok := w[name]; !ok {
			out = append(out, name+" (only in the stubs)")
		}
	}
	slices.Sort(out)
	if len(out) == 0 {
		out = []string{"file-level fields (package, imports, options or order of declarations)"}
	}
	return out
}
