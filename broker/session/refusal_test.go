package session

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc/codes"
)

// TestARefusedHelloIsLogged: a Hello the broker refuses (here a retry
// fixes it: Unavailable) is logged with the handler, the instance and the
// reason, so that an instance that keeps retrying is seen from the
// broker's side; a session welcomed and then ended logs no refusal.
func TestARefusedHelloIsLogged(t *testing.T) {
	logs := &lockedBuffer{}
	h := start(t, Options{Log: hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Info})})
	h.attacher.err = fmt.Errorf("%w: the broker is starting", ErrTryLater)
	c := h.connect(t)
	c.send(hello())
	if st := c.end(); st.Code() != codes.Unavailable {
		t.Fatalf("the Hello was refused with %v, want Unavailable", st)
	}
	// Logged before the stream's status is sent, so before c.end returned.
	line := logs.line("refused a handler instance's Hello")
	for _, want := range []string{"refused", "handler=secret-ttl", "code=Unavailable", "the broker is starting"} {
		if !strings.Contains(line, want) {
			t.Errorf("the refusal's log line %q does not say %q", line, want)
		}
	}

	h.attacher.err = nil
	c = h.connect(t)
	c.send(hello())
	c.welcome()
	h.instance(t)
	c.cancel()
	c.end()
	if n := strings.Count(logs.String(), "refused a handler instance's Hello"); n != 1 {
		t.Errorf("%d refusals logged, want the one", n)
	}
}

// lockedBuffer is a log output a test reads while the server writes.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// line is the first line holding substr; "" when none does.
func (b *lockedBuffer) line(substr string) string {
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, substr) {
			return line
		}
	}
	return ""
}
