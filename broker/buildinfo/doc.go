// Package buildinfo says which build of Tether is running: the version
// stamped at link time (-ldflags "-X .../buildinfo.stamped=v1.2.3", as the
// image build does with git describe), else the commit that go build
// records from the checkout, else "dev". Both binaries print it for
// --version, the broker sends it in Welcome and as its User-Agent.
//
// Where it sits among the broker's parts: docs/design.md, "The architecture".
package buildinfo
