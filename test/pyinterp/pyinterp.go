package pyinterp

import (
	"bytes"
	"fmt"
	"os/exec"
	"sync"
)

// Python is Debian's interpreter, which sees python3-grpcio and
// python3-protobuf (a pyenv or virtualenv python on PATH would not). The
// Python SDK's handlers run on it.
const Python = "/usr/bin/python3"

// PythonMissing says why Python cannot run a handler on the SDK here, or
// is empty when it can.
var PythonMissing = sync.OnceValue(func() string {
	out, err := exec.Command(Python, "-I", "-B", "-c", "import grpc, google.protobuf").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("%s cannot import grpc and google.protobuf (apt-get install -y python3-grpcio python3-protobuf): %v %s",
			Python, err, bytes.TrimSpace(out))
	}
	return ""
})
