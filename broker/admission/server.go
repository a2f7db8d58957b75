package admission

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/hashicorp/go-hclog"
	"go.opentelemetry.io/otel/trace"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/tether-dev/tether/broker/binding"
	"github.com/tether-dev/tether/broker/certs"
	"github.com/tether-dev/tether/broker/limit"
	"github.com/tether-dev/tether/broker/metrics"
	"github.com/tether-dev/tether/broker/tracing"
	tetherv1 "github.com/tether-dev/tether/proto/tether/v1"
)

// Reviewer answers reviews: the dispatcher.
type Reviewer interface {
	// Review forwards req to an instance of handler for its binding bindingID and returns
	// the handler's answer. It returns the binding (nil when the handler or the binding is
	// unknown to this broker, e.g. a replica that does not lead) also when err != nil, so
	// that the server can apply the binding's failure policy. An error may wrap
	// ErrNoInstance or ErrInvalidResponse to say why, for the metrics.
	Review(ctx context.Context, handler, bindingID string, req *admissionv1.AdmissionRequest) (*tetherv1.AdmissionResponse, *binding.Binding, error)
	// Binding returns the binding, nil when it is unknown. The server looks
	// it up before it reads a review's body.
	Binding(handler, bindingID string) *binding.Binding
}

// Errors a Reviewer may wrap.
var (
	// ErrNoInstance: no instance of the handler is connected.
	ErrNoInstance = errors.New("no instance of the handler is connected")
	// ErrInvalidResponse: the handler's answer is not an admission answer.
	ErrInvalidResponse = errors.New("the handler's answer is not a valid admission response")
)

// PathPrefix starts the path of every admission endpoint.
const PathPrefix = "/admit/"

// DefaultMaxReviewsPerHandler is MaxReviewsPerHandler's default: several
// windows' worth, and a bound on the memory reviews can take (each may
// hold a body of up to MaxBodyBytes).
const DefaultMaxReviewsPerHandler = 64

// DefaultMaxBodyBytes fits an AdmissionReview of an update: the API server
// accepts objects of up to 3 MiB, and an update carries two.
const DefaultMaxBodyBytes = 7 << 20

// Options configure a Server. Reviewer, Certs, and one of Listener or
// Listen are required.
type Options struct {
	Log      hclog.Logger
	Reviewer Reviewer
	// Listener to serve on; else Listen is the address to bind.
	Listener net.Listener
	Listen   string
	// Certs serve TLS; Load them before Start.
	Certs *certs.Serving
	// Paths signs and checks the endpoints' paths: a request whose path it
	// did not sign is answered 404 before anything else.
	Paths *PathKey
	// MaxReviewsPerHandler bounds the reviews of one handler that may be
	// under way at once; more are answered 429 at once, before their body
	// is read, and the API server applies the webhook's failure policy
	// (default DefaultMaxReviewsPerHandler).
	MaxReviewsPerHandler int
	// MaxBodyBytes bounds a review's body, and the object a patch may
	// make; default DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// Metrics times reviews and counts failures; nil records nothing.
	Metrics *metrics.Metrics
	// Tracer makes a trace of each review (trace.go); nil: none.
	Tracer trace.Tracer
}

// Server is the broker's HTTPS admission endpoint.
type Server struct {
	opts Options
	log  hclog.Logger
	lis  net.Listener

	underWay *limit.Counter // reviews per handler
}

// New checks opts and returns a Server; it binds and starts nothing.
func New(opts Options) (*Server, error) {
	if opts.Log == nil {
		opts.Log = hclog.NewNullLogger()
	}
	if opts.Reviewer == nil {
		return nil, errors.New("admission server: a Reviewer is required")
	}
	if opts.Certs == nil {
		return nil, errors.New("admission server: certificates are required")
	}
	if opts.Paths == nil {
		return nil, errors.New("admission server: a path key is required")
	}
	if opts.MaxReviewsPerHandler <= 0 {
		opts.MaxReviewsPerHandler = DefaultMaxReviewsPerHandler
	}
	if opts.Listener == nil && opts.Listen == "" {
		return nil, errors.New("admission server: a listen address is required")
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	return &Server{opts: opts, log: opts.Log, underWay: &limit.Counter{PerKey: opts.MaxReviewsPerHandler}}, nil
}

// Listen binds the listener without serving yet, so that callers can learn
// the address (Addr) before Start.
func (s *Server) Listen() error {
	if s.lis != nil {
		return nil
	}
	if s.opts.Listener != nil {
		s.lis = s.opts.Listener
		return nil
	}
	lis, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listening for admission reviews on %s: %w", s.opts.Listen, err)
	}
	s.lis = lis
	return nil
}

// Addr is the address served, once Listen has bound it; else nil.
func (s *Server) Addr() net.Addr {
	if s.lis == nil {
		return nil
	}
	return s.lis.Addr()
}

// shutdownGrace is how long Start waits for open reviews at shutdown;
// the API server's own timeout (30 s at most) ends them anyway.
const shutdownGrace = 10 * time.Second

// Start serves HTTPS until ctx ends, then lets open reviews finish (for up
// to shutdownGrace) and closes the listener.
func (s *Server) Start(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	srv := &http.Server{
		Handler: s,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: s.opts.Certs.GetCertificate,
		},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A review may wait up to the longest webhook timeout, 30 s.
		WriteTimeout: binding.MaxAdmissionTimeout + 10*time.Second,
		IdleTimeout:  90 * time.Second,
		ErrorLog:     s.log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeTLS(s.lis, "", "") }()
	s.log.Info("serving admission reviews", "address", s.lis.Addr().String())
	select {
	case err := <-done:
		return fmt.Errorf("serving admission reviews: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-done; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving admission reviews: %w", err)
	}
	return nil
}

// ServeHTTP answers one AdmissionReview POSTed to a path of Paths. Its
// checks go from the cheapest to the dearest, so that a caller who does
// not know the path, or a flood, costs little: the signature, the method,
// a slot of the handler's, the binding, and only then the body.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	handler, bindingID, ok := s.opts.Paths.parse(r.URL.Path)
	if !ok {
		// Nothing more is said: the caller is not the API server.
		s.log.Debug("refused an admission request with an unsigned path", "path", r.URL.Path, "remote", r.RemoteAddr)
		http.NotFound(w, r)
		return
	}
	r, span := s.traceReview(r, handler, bindingID)
	defer span.End()
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		s.refuse(w, r, http.StatusMethodNotAllowed, fmt.Sprintf("method %s not allowed: admission reviews are POSTed", r.Method))
		return
	}
	if !s.underWay.Acquire(handler) {
		s.refuse(w, r, http.StatusTooManyRequests, fmt.Sprintf("handler %q has %d reviews under way already", handler, s.opts.MaxReviewsPerHandler))
		return
	}
	defer s.underWay.Release(handler)
	b := s.opts.Reviewer.Binding(handler, bindingID)
	switch {
	case b == nil:
		// The API server applies the webhook's own failure policy.
		s.refuse(w, r, http.StatusServiceUnavailable, fmt.Sprintf("handler %q has no binding %q on this broker (unknown, or this replica does not lead)", handler, bindingID))
		return
	case !b.Kind.IsAdmission():
		s.refuse(w, r, http.StatusNotFound, fmt.Sprintf("binding %q of handler %q is a %s binding, not validate or mutate", bindingID, handler, b.Kind))
		return
	}
	timeout, err := s.timeout(r.URL.Query(), b)
	if err != nil {
		s.refuse(w, r, http.StatusBadRequest, err.Error())
		return
	}
	review, code, err := s.decode(w, r)
	if err != nil {
		s.refuse(w, r, code, err.Error())
		return
	}
	s.review(w, r, handler, bindingID, review, timeout)
}

// timeout is the webhook's timeout: the API server's ?timeout=, else the
// binding's, else the default.
func (s *Server) timeout(q url.Values, b *binding.Binding) (time.Duration, error) {
	if v := q.Get("timeout"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return 0, fmt.Errorf("the timeout parameter %q is not a positive duration", v)
		}
		return d, nil
	}
	if b.Admission.Timeout > 0 {
		return b.Admission.Timeout, nil
	}
	return binding.DefaultAdmissionTimeout, nil
}

// reviewDeadline is how long the handler gets within the webhook's
// timeout: a margin is kept for the broker to answer in time, even with
// its failure policy.
func reviewDeadline(timeout time.Duration) time.Duration {
	return timeout - min(time.Second, timeout/5)
}

// decode reads an admission.k8s.io/v1 AdmissionReview with a request; on
// error it returns the HTTP status to answer with.
func (s *Server) decode(w http.ResponseWriter, r *http.Request) (*admissionv1.AdmissionReview, int, error) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("the review is larger than %d bytes", tooLarge.Limit)
		}
		return nil, http.StatusBadRequest, fmt.Errorf("reading the review: %w", err)
	}
	review := &admissionv1.AdmissionReview{}
	if err := json.Unmarshal(body, review); err != nil {
		return nil, http.StatusBadRequest, fmt.Errorf("the body is not a JSON AdmissionReview: %w", err)
	}
	want := admissionv1.SchemeGroupVersion.String()
	switch {
	case review.APIVersion != want || review.Kind != "AdmissionReview":
		return nil, http.StatusBadRequest, fmt.Errorf("expected an AdmissionReview of %s, got kind %q of %q", want, review.Kind, review.APIVersion)
	case review.Request == nil:
		return nil, http.StatusBadRequest, errors.New("the AdmissionReview has no request")
	case review.Request.UID == "":
		return nil, http.StatusBadRequest, errors.New("the AdmissionReview's request has no uid")
	}
	return review, 0, nil
}

// refuse answers a request that is not a review the broker can serve.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, code int, msg string) {
	traceRefused(r.Context(), code, msg)
	tracing.Logger(r.Context(), s.log).Warn("refused an admission request", "status", code, "method", r.Method,
		"path", r.URL.Path, "remote", r.RemoteAddr, "reason", msg)
	http.Error(w, msg, code)
}
