package main

import (
	"bytes"
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestRunShowsHandover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var out bytes.Buffer
	began := time.Now()
	require.NoError(t, run(ctx, &out, ""))
	t.Logf("example took %v:\n%s", time.Since(began), out.String())
	s := out.String()
	for _, want := range []string{"embedded Redis", "leader: ", "resigns", "handover: ", "transfers leadership", "nightly job ran 1 time(s) among 3 replicas", "stopped"} {
		require.Contains(t, s, want)
	}
	require.Equal(t, 1, strings.Count(s, "runs the nightly job"))
	require.Less(t, time.Since(began), 10*time.Second)
}

func TestRedact(t *testing.T) {
	require.Equal(t, "redis://user:xxxxx@127.0.0.1:6379/0", redact("redis://user:secret@127.0.0.1:6379/0"))
}

func TestNormalizeRedis(t *testing.T) {
	tests := []struct {
		name string
		give string
		want string
		err  string
	}{
		{name: "empty: embedded", give: "", want: ""},
		{name: "address", give: "127.0.0.1:6379", want: "redis://127.0.0.1:6379"},
		{name: "address with spaces", give: " 127.0.0.1:41234 ", want: "redis://127.0.0.1:41234"},
		{name: "url kept", give: "redis://:pw@127.0.0.1:6379/2", want: "redis://:pw@127.0.0.1:6379/2"},
		{name: "tls url kept", give: "rediss://127.0.0.1:6380", want: "rediss://127.0.0.1:6380"},
		{name: "no port", give: "127.0.0.1", err: "want host:port or a redis:// URL"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := normalizeRedis(tt.give)
			if tt.err != "" {
				require.ErrorContains(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

// TestRunInterrupted cancels the example once a leader is elected: it
// stops cleanly and reports no error.
func TestRunInterrupted(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w := &notifyWriter{want: "leader: ", hit: make(chan struct{})}
	done := make(chan error, 1)
	go func() { done <- run(ctx, w, "") }()
	select {
	case <-w.hit:
	case <-ctx.Done():
		t.Fatalf("no leader elected:\n%s", w.String())
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("run did not return after cancel:\n%s", w.String())
	}
	require.Contains(t, w.String(), "interrupted; stopped")
}

func TestRunUnreachableRedis(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close()) // nothing listens there now
	var out bytes.Buffer
	err = run(context.Background(), &out, "redis://"+addr)
	require.ErrorContains(t, err, "cannot reach Redis at redis://"+addr)
}

// notifyWriter collects output and closes hit once it contains want.
type notifyWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	hit  chan struct{}
	once sync.Once
}

func (w *notifyWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.hit) })
	}
	return n, err
}

func (w *notifyWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}
