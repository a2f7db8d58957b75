package memlimit

import (
	"fmt"
	"runtime/debug"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
)

// EnvLimit is the variable the manifests fill with the container's memory
// limit in bytes.
const EnvLimit = "TETHER_MEMORY_LIMIT"

// Share is the part of the container's limit the runtime aims to stay
// under; the rest is headroom for what the runtime does not count.
const Share = 0.9

// Limit is the soft limit for the runtime from the environment: Share of
// $TETHER_MEMORY_LIMIT, or 0 when there is none to set (the variable empty,
// or GOMEMLIMIT set). A value that is not a positive number of bytes is an
// error rather than no limit, so that a typo in a manifest is seen.
func Limit(getenv func(string) string) (int64, error) {
	if getenv("GOMEMLIMIT") != "" {
		return 0, nil
	}
	v := strings.TrimSpace(getenv(EnvLimit))
	if v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want the container's memory limit as a positive number of bytes", EnvLimit, v)
	}
	return int64(float64(n) * Share), nil
}

// Apply sets the runtime's soft memory limit from the environment, and
// logs the limit it set.
func Apply(getenv func(string) string, log hclog.Logger) error {
	limit, err := Limit(getenv)
	if err != nil || limit == 0 {
		return err
	}
	debug.SetMemoryLimit(limit)
	log.Info("soft memory limit set", "bytes", limit, "share_of_container_limit", Share)
	return nil
}
