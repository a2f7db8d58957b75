// Package pyhandler runs the Python handler in test/python/handler.py, a
// real process on the Python SDK (sdk/python), against an in-process broker
// and a real control plane: lifecycle deliveries, a timer, cancellation, a
// rejected Hello, Goodbye on SIGTERM, reconnection, and with --admission the
// validating and mutating webhooks the broker serves. It also runs the SDK's
// unit tests and checks that the generated stubs (gen.sh) match the proto.
//
// The tests need /usr/bin/python3 with Debian's python3-grpcio and
// python3-protobuf, and skip when they are missing. The staleness check of
// the generated stubs also needs protoc 3.21.12 and grpc_python_plugin
// (protobuf-compiler, protobuf-compiler-grpc), and skips without them.
package pyhandler
