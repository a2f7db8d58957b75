package relay

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/tether-dev/tether/broker/admission"
	"github.com/tether-dev/tether/broker/binding"
)

// newHTTPServer is the server of HTTPS mode, with the broker's admission
// server's timeouts: a review may wait up to the longest webhook timeout.
func (r *Relay) newHTTPServer() *http.Server {
	return &http.Server{
		Handler: http.HandlerFunc(r.relayRequest),
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: r.getCertificate,
		},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		// A resend comes on top of the review's own wait.
		WriteTimeout: binding.MaxAdmissionTimeout + 10*time.Second,
		IdleTimeout:  90 * time.Second,
		ErrorLog:     r.log.StandardLogger(&hclog.StandardLoggerOptions{ForceLevel: hclog.Debug}),
	}
}

// relayRequest sends a request to the local broker, else to the peers,
// and passes the first answer back. The body is read whole first, so that
// it can be sent again: a review is a few kilobytes, and bounded as the
// broker bounds it.
func (r *Relay) relayRequest(w http.ResponseWriter, req *http.Request) {
	st := r.tls.Load()
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			http.Error(w, fmt.Sprintf("the request is larger than %d bytes", tooLarge.Limit), http.StatusRequestEntityTooLarge)
			return
		}
		http.Error(w, fmt.Sprintf("reading the request: %v", err), http.StatusBadRequest)
		return
	}
	resp, err := r.roundTrip(req, st, body)
	if err != nil {
		if req.Context().Err() != nil {
			return // the caller gave up: nobody to answer
		}
		r.log.Warn("no broker answered a request", "path", logPath(req.URL.Path), "error", err)
		http.Error(w, fmt.Sprintf("no broker answered: %v", err), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	copyHeader(w.Header(), resp.Header)
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		// The answer is cut short: end the connection, so that the caller
		// cannot take a part for the whole.
		panic(http.ErrAbortHandler)
	}
}

// roundTrip sends the request to the local broker, and, when no answer
// came from it (refused, reset, ended, a TLS or dial failure: nothing of
// an answer arrived, so the broker did not answer it), to the peers in a
// random order until one answers. An answer, whatever its status, is
// final: only a request without one is sent again, which is safe for a
// review since the broker writes nothing for it.
func (r *Relay) roundTrip(in *http.Request, st *tlsState, body []byte) (*http.Response, error) {
	ctx := in.Context()
	resp, localErr := send(ctx, st, in, body, r.opts.Local)
	if localErr == nil || ctx.Err() != nil {
		return resp, localErr
	}
	errs := []error{fmt.Errorf("the local broker %s: %w", r.opts.Local, localErr)}
	peers, err := r.peers(ctx)
	if err != nil {
		return nil, errors.Join(append(errs, err)...)
	}
	for _, i := range rand.Perm(len(peers)) {
		resp, err := send(ctx, st, in, body, peers[i])
		if err == nil {
			r.log.Info("the local broker did not answer a request; resent it to another replica", "path", logPath(in.URL.Path),
				"from", r.opts.Local, "to", peers[i], "error", errors.Join(errs...).Error())
			return resp, nil
		}
		errs = append(errs, fmt.Errorf("replica %s: %w", peers[i], err))
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

// send makes one attempt at addr: the request's method, path, query and
// end-to-end headers, over TLS verified with the admission CA.
func send(ctx context.Context, st *tlsState, in *http.Request, body []byte, addr string) (*http.Response, error) {
	u := *in.URL
	u.Scheme, u.Host = "https", addr
	out, err := http.NewRequestWithContext(ctx, in.Method, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	copyHeader(out.Header, in.Header)
	out.Host = in.Host
	return st.transport.RoundTrip(out)
}

// hopByHop are the headers of one connection, not of the request or
// answer (RFC 9110, 7.6.1).
var hopByHop = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// copyHeader adds src's end-to-end headers to dst.
func copyHeader(dst, src http.Header) {
	skip := map[string]bool{}
	for _, h := range hopByHop {
		skip[h] = true
	}
	for _, v := range src["Connection"] {
		for f := range strings.SplitSeq(v, ",") {
			skip[http.CanonicalHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	for k, vs := range src {
		if !skip[k] {
			dst[k] = append(dst[k], vs...)
		}
	}
}

// logPath is an admission path (/admit/<handler>/<binding>/<signature>)
// without its signature, which lets whoever knows it call the endpoint.
func logPath(p string) string {
	rest, ok := strings.CutPrefix(p, admission.PathPrefix)
	if !ok {
		return p
	}
	if parts := strings.SplitN(rest, "/", 3); len(parts) == 3 {
		return admission.PathPrefix + parts[0] + "/" + parts[1] + "/..."
	}
	return p
}
