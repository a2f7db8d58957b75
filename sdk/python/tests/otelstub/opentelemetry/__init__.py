"""A stand-in for the opentelemetry API in the SDK's unit tests, which
tests/test_tracing.py puts on sys.path: the real package cannot be installed
where these tests run (no PyPI, no Debian package). It has only the names
tether.tracing uses, with the real API's signatures, and records the spans
it starts in opentelemetry.trace.FINISHED."""
