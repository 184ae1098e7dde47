package httppoll

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/poller"
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

// TestRecordChanges: only a new status, a new class of error, a new ETag
// or a new body is recorded; an unchanged poll writes nothing, and neither
// does another lease (a handoff is no change of the response).
func TestRecordChanges(t *testing.T) {
	f := newFixture(t)
	var status atomic.Int64
	var body atomic.Value
	body.Store("a")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, body.Load().(string))
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client, Record: results.RecordChanges})
	s := sess(srv.URL, time.Second)

	got := []string{}
	for _, step := range []struct {
		code int
		body string
	}{{200, "a"}, {200, "a"}, {200, "b"}, {200, "b"}, {503, "b"}, {503, "b"}, {200, "b"}, {404, "b"}, {404, "b"}} {
		status.Store(int64(step.code))
		body.Store(step.body)
		_ = p.Poll(ctxT(t), poller.NewTurn(s, f.lease, nil))
	}
	for _, r := range recorded(t, f.client) {
		got = append(got, r["status"].(string)+"/"+r["changed"].(string))
	}
	require.Equal(t, []string{"200/1", "200/1", "503/1", "200/1", "404/1"}, got)
	entries := recorded(t, f.client)
	require.Equal(t, sha256Hex("a"), entries[0]["body_sha256"])
	require.Equal(t, sha256Hex("b"), entries[1]["body_sha256"])
	require.Empty(t, entries[2]["body_sha256"], "no content hash for a 5xx")

	// Another lease (after a handoff and back): no change.
	_ = p.Poll(ctxT(t), poller.NewTurn(s, nil, nil))
	require.Len(t, recorded(t, f.client), 5)

	// Same status, another error class: a refused connection vs a timeout.
	addr := srv.Listener.Addr().String()
	srv.Close()
	down := sess("http://"+addr+"/", time.Second)
	_ = p.Poll(ctxT(t), poller.NewTurn(down, nil, nil))
	_ = p.Poll(ctxT(t), poller.NewTurn(down, nil, nil))
	require.Len(t, recorded(t, f.client), 6)
}

// TestRecordBody: a result carries the first RecordBody bytes of the body,
// of any status; without RecordBody, none.
func TestRecordBody(t *testing.T) {
	f := newFixture(t)
	var status atomic.Int64
	status.Store(200)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(int(status.Load()))
		_, _ = io.WriteString(w, strings.Repeat("0123456789", 10_000)) // past MaxBodyBytes
	}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Client: f.client, RecordBody: 12})
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	status.Store(503)
	require.Error(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	entries := recorded(t, f.client)
	require.Equal(t, "012345678901", entries[0]["body"])
	require.Equal(t, sha256Hex(strings.Repeat("0123456789", 10_000)[:MaxBodyBytes]), entries[0]["body_sha256"])
	require.Equal(t, "012345678901", entries[1]["body"])

	p = newPoller(t, Config{Client: f.client})
	require.Error(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), f.lease, nil)))
	require.NotContains(t, recorded(t, f.client)[2], "body")

	_, err := New(Config{Client: f.client, Worker: "w1", RecordBody: MaxBodyBytes + 1})
	require.ErrorContains(t, err, "RecordBody must be from 0 to 65536")
}

func TestRecordNone(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(srv.Close)
	p := newPoller(t, Config{Record: results.RecordNone})
	require.NoError(t, p.Poll(ctxT(t), poller.NewTurn(sess(srv.URL, time.Second), nil, nil)))
}

// TestChangesMemoryIsBounded: a full memory forgets one session per new
// one; a forgotten session counts as changed again (an extra change, never
// a missed one).
func TestChangesMemoryIsBounded(t *testing.T) {
	c := newChanges(2)
	o := outcome{status: 200, body: "ab"}
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
	require.True(t, c.changed("c", outcome{status: 200, body: "cd"}), "a new body")
}

// TestEmptyBodyHash: a known-empty body (a 204) is not hashed; its hash
// is the constant, which must be the SHA-256 of nothing.
func TestEmptyBodyHash(t *testing.T) {
	require.Equal(t, sha256Hex(""), emptySHA256)
}
