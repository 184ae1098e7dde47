package election

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestElectShortForm(t *testing.T) {
	client := realClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	elected := make(chan int64, 1)
	done := make(chan error, 1)
	go func() {
		done <- Elect(ctx, client, "short", func(ctx context.Context, token int64) {
			elected <- token
			<-ctx.Done()
		})
	}()
	select {
	case tok := <-elected:
		require.Positive(t, tok)
	case <-time.After(20 * time.Second):
		t.Fatal("never elected")
	}
	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Elect did not return")
	}
	require.Equal(t, int64(0), client.Exists(context.Background(), "poll:lease:{election:short}").Val(), "resigned on return")
	_, err := New(Config{Client: client, Role: "bad role"})
	require.Error(t, err)
	require.Error(t, Elect(context.Background(), client, "bad role", nil))
}
