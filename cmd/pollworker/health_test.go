package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestHealthHandler(t *testing.T) {
	var ready atomic.Bool
	h := healthHandler(ready.Load, nil, nil)
	serve := func(method, path string) (int, string) {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(method, path, nil))
		return w.Code, w.Body.String()
	}
	tests := []struct {
		name     string
		ready    bool
		method   string
		path     string
		wantCode int
		wantBody string
	}{
		{name: "alive when not ready", path: "/healthz", wantCode: http.StatusOK, wantBody: "ok\n"},
		{name: "alive when ready", ready: true, path: "/healthz", wantCode: http.StatusOK, wantBody: "ok\n"},
		{name: "not ready", path: "/readyz", wantCode: http.StatusServiceUnavailable, wantBody: "not ready\n"},
		{name: "ready", ready: true, path: "/readyz", wantCode: http.StatusOK, wantBody: "ready\n"},
		{name: "head", ready: true, method: http.MethodHead, path: "/readyz", wantCode: http.StatusOK},
		{name: "post", method: http.MethodPost, path: "/readyz", wantCode: http.StatusMethodNotAllowed},
		{name: "other path", path: "/", wantCode: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ready.Store(tt.ready)
			method := tt.method
			if method == "" {
				method = http.MethodGet
			}
			code, body := serve(method, tt.path)
			require.Equal(t, tt.wantCode, code)
			if tt.wantBody != "" {
				require.Equal(t, tt.wantBody, body)
			}
		})
	}
}
