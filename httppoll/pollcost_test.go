package httppoll

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pollworker/pollworker/results"
)

// BenchmarkPollCPU measures the CPU a poll costs this process, stateless
// (Poll) and with saved state (the coordinator's PollState path, a slot
// in memory), against a local target answering 204.
//
// Run: go test -run '^$' -bench BenchmarkPollCPU -benchmem ./httppoll
func BenchmarkPollCPU(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	b.Cleanup(srv.Close)
	for _, stateful := range []bool{false, true} {
		name := "stateless"
		if stateful {
			name = "stateful"
		}
		b.Run(name, func(b *testing.B) {
			p, err := New(Config{Worker: "w1", Record: results.RecordNone})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(p.CloseIdleConnections)
			s := sess(srv.URL, time.Second)
			slot := &fakeSlot{}
			ctx := context.Background()
			b.ReportAllocs()
			for b.Loop() {
				if stateful {
					_ = p.poll(ctx, s, nil, slot)
				} else {
					_ = p.Poll(ctx, s, nil)
				}
			}
		})
	}
}
