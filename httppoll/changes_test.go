package httppoll

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/results"
)

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		give error
		want errClass
	}{
		{name: "ok", give: nil, want: classOK},
		{name: "5xx", give: fmt.Errorf("poll: %w", &StatusError{Code: 503}), want: classServer},
		{name: "deadline", give: fmt.Errorf("Get: %w", context.DeadlineExceeded), want: classTimeout},
		{name: "net timeout", give: os.ErrDeadlineExceeded, want: classTimeout},
		{name: "canceled", give: context.Canceled, want: classCanceled},
		{name: "refused", give: &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, want: classRefused},
		{name: "reset", give: &net.OpError{Op: "read", Err: os.NewSyscallError("read", syscall.ECONNRESET)}, want: classReset},
		{name: "dns", give: &net.DNSError{Err: "no such host", Name: "x.invalid"}, want: classDNS},
		{name: "tls", give: tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, want: classTLS},
		{name: "other", give: errors.New("unsupported protocol scheme"), want: classOther},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, classify(tt.give))
		})
	}
}

// TestRecordChanges: only a new status, a new class of error or a new lease
// is recorded; an unchanged poll writes nothing.
func TestRecordChanges(t *testing.T) {
	f := newFixture(t)
	var status atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client, Record: results.RecordChanges})
	s := sess(srv.URL, time.Second)

	want := []string{}
	for _, code := range []int{200, 200, 200, 503, 503, 200, 404, 404} {
		status.Store(int64(code))
		_ = p.Poll(ctxT(t), s, f.lease)
	}
	for _, r := range recorded(t, f.client) {
		want = append(want, r["status"].(string))
	}
	require.Equal(t, []string{"200", "503", "200", "404"}, want)

	// Another lease (after a handoff and back): recorded once.
	_ = p.Poll(ctxT(t), s, nil)
	_ = p.Poll(ctxT(t), s, nil)
	require.Len(t, recorded(t, f.client), 5)

	// Same status, another error class: a refused connection vs a timeout.
	addr := srv.Listener.Addr().String()
	srv.Close()
	down := sess("http://"+addr+"/", time.Second)
	_ = p.Poll(ctxT(t), down, nil)
	_ = p.Poll(ctxT(t), down, nil)
	require.Len(t, recorded(t, f.client), 6)
}

func TestRecordNone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Record: results.RecordNone})
	require.NoError(t, p.Poll(ctxT(t), sess(srv.URL, time.Second), nil))
}

// TestChangesMemoryIsBounded: a full memory forgets one session per new
// one; a forgotten session is recorded again (an extra entry, never a
// missed change).
func TestChangesMemoryIsBounded(t *testing.T) {
	c := newChanges(2)
	o := outcome{token: 1, status: 200}
	require.True(t, c.changed("a", o))
	require.True(t, c.changed("b", o))
	require.False(t, c.changed("a", o))
	require.True(t, c.changed("c", o))
	require.Len(t, c.last, 2)
	forgotten := 0
	for _, id := range []string{"a", "b"} {
		if _, ok := c.last[id]; !ok {
			forgotten++
		}
	}
	require.Equal(t, 1, forgotten)
	require.True(t, c.changed("c", outcome{token: 2, status: 200}), "a new lease")
}
