package bench

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		name string
		give []float64
		want Summary
	}{
		{name: "one", give: []float64{3}, want: Summary{N: 1, Median: 3, P99: 3, Max: 3}},
		{name: "unsorted", give: []float64{5, 1, 3}, want: Summary{N: 3, Median: 3, P99: 5, Max: 5}},
		{name: "hundred", give: seq(100), want: Summary{N: 100, Median: 50, P99: 99, Max: 100}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.Equal(t, tt.want, Summarize(tt.give))
		})
	}
	require.True(t, Summarize(nil).Median != Summarize(nil).Median, "empty summary is NaN")
}

func seq(n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = float64(i + 1)
	}
	return out
}

func TestRecorderWatch(t *testing.T) {
	r := NewRecorder()
	r.Poll("a", "w0")
	r.Poll("b", "w1")
	require.Equal(t, 2, r.Polled())
	done := r.Watch(time.Now(), map[string]string{"a": "w0"}, "")
	r.Poll("a", "w0") // the old owner does not count
	select {
	case <-done:
		t.Fatal("done before the successor polled")
	default:
	}
	r.Poll("a", "w2")
	<-done
	gaps, holes, missing := r.Gaps()
	require.Len(t, gaps, 1)
	require.Len(t, holes, 1)
	require.Zero(t, missing)
	require.Equal(t, map[string]string{"a": "w2", "b": "w1"}, r.Owners())
}

func TestProxyCut(t *testing.T) {
	defer goleak.VerifyNone(t)
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer echo.Close()
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }()
		}
	}()
	p, err := NewProxy(echo.Addr().String())
	require.NoError(t, err)
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("ping\n"))
	require.NoError(t, err)
	line, err := bufio.NewReader(c).ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "ping\n", line)

	p.Cut()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.Error(t, err, "the connection is closed by the cut")
	_, err = net.Dial("tcp", p.Addr())
	require.Error(t, err, "new connections are refused")
	p.Cut()
	echo.Close()
}

func TestSummaryJSONNaN(t *testing.T) {
	b, err := json.Marshal(Summarize(nil))
	require.NoError(t, err)
	require.JSONEq(t, `{"n":0,"median":null,"p99":null,"max":null}`, string(b))
}
