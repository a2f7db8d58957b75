package typescript

import (
	"os"
	"testing"

	"github.com/tether-dev/tether/test/controlplane"
)

func TestMain(m *testing.M) { os.Exit(controlplane.RunTests(m)) }
