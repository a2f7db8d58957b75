package auth

import (
	"errors"
	"net"
	"net/http"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Protect serves next only to requests whose bearer token the API server
// accepts (TokenReview) and whose identity SubjectAccessReview allows the
// request's lowercased method on its path as a non-resource URL: "get" on
// "/metrics", which a ClusterRole grants with nonResourceURLs. It answers
// 401 without an accepted token, 403 without the right, and 503 when the
// API server cannot be asked; reviews are cached as the handlers' are.
func (a *Authenticator) Protect(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			host = r.RemoteAddr
		}
		user, err := a.authenticateToken(r.Context(), strings.TrimSpace(token), host)
		if err != nil {
			code := http.StatusServiceUnavailable
			switch status.Code(err) {
			case codes.Unauthenticated:
				code = http.StatusUnauthorized
			case codes.ResourceExhausted:
				code = http.StatusTooManyRequests
			}
			http.Error(w, status.Convert(err).Message(), code)
			return
		}
		right := Right{Verb: strings.ToLower(r.Method), Path: r.URL.Path, Binding: -1}
		if err := a.check(r.Context(), user, right); err != nil {
			code := http.StatusServiceUnavailable
			if errors.Is(err, ErrDenied) {
				code = http.StatusForbidden
			}
			http.Error(w, err.Error(), code)
			return
		}
		next.ServeHTTP(w, r)
	})
}
