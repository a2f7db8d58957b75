package incluster

import (
	"os"
	"testing"

	"github.com/tether-dev/tether/test/node"
)

func TestMain(m *testing.M) { os.Exit(node.RunTests(m)) }
