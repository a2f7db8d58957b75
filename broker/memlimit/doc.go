// Package memlimit gives the Go runtime a soft memory limit below the
// container's, so that garbage is collected harder as the Pod nears its
// limit instead of the Pod being OOM-killed at it.
//
// GOMEMLIMIT set to the container's limit itself (what the downward API
// can give) leaves no headroom: the runtime counts only the heap, stacks
// and its own structures, not the binary's text or what the kernel charges
// the cgroup besides. The manifests therefore pass the limit in
// TETHER_MEMORY_LIMIT (bytes, from resourceFieldRef limits.memory) and
// both binaries set the runtime's limit to [Share] of it. A GOMEMLIMIT that
// is set wins: the runtime has read it already.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package memlimit
