// Package ociimage makes OCI images of this repository's static Go binaries
// without Docker and without a registry: one layer on an empty base with the
// names of root and nonroot, run as 65532:65532, written as a tarball that
// `ctr images import`, `kind load image-archive` and `docker load` take. The
// same binaries make the same image, digest for digest.
//
// [Tether] is the image the Dockerfile describes (the broker and the example
// handler); test/image writes it for 'make image', and test/node imports it
// and a pause image into the one-node cluster's containerd.
package ociimage
