package main

import (
	"io"
	"net/http"
)

// healthHandler serves the probes of the run command:
//
//	GET /healthz  200 while the process runs (liveness)
//	GET /readyz   200 while ready() is true, else 503 (readiness)
//	GET /metrics  Prometheus metrics, when metrics is not nil
//	GET /         the status page, when page is not nil
func healthHandler(ready func() bool, metrics, page http.Handler) http.Handler {
	mux := http.NewServeMux()
	if metrics != nil {
		mux.Handle("GET /metrics", metrics)
	}
	if page != nil {
		mux.Handle("GET /", page)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if !ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}
