package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/internal/redistest"
)

// A second registry with a live id never claims it: its heartbeat fails with
// ErrDuplicateID naming the holder, and writes nothing.
func TestRealDuplicateIDRefused(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	first := newRegistry(t, c, "w", time.Minute)
	second := newRegistry(t, c, "w", time.Minute)
	require.NotEqual(t, first.Incarnation(), second.Incarnation())
	heartbeat(t, first)

	err := second.Heartbeat(ctx)
	require.ErrorIs(t, err, ErrDuplicateID)
	var dup *DuplicateIDError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, "w", dup.ID)
	require.Equal(t, first.Info(), dup.Holder)
	require.False(t, dup.TakenOver)
	require.Positive(t, dup.TTL)
	require.Contains(t, err.Error(), `id "w" is in use by another live worker (host `)
	require.Contains(t, err.Error(), "incarnation "+first.Incarnation())

	infos, err := first.Get(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, []Info{first.Info()}, infos, "the holder's entry is untouched")

	// The second one leaving does not remove the first.
	require.NoError(t, second.Leave(ctx))
	require.Equal(t, []string{"w"}, members(t, first).Nodes)
	heartbeat(t, first)
}

// A registry that stopped heartbeating past its TTL and whose id another
// incarnation took meanwhile does not take it back: its heartbeat reports
// the takeover, and its Leave removes nothing of the new holder's.
func TestRealTakenOverWhilePaused(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	old := newRegistry(t, c, "w", realTTL)
	heartbeat(t, old)
	require.Eventually(t, func() bool {
		_, ok, err := old.Claim(ctx)
		return err == nil && !ok
	}, 5*time.Second, 10*time.Millisecond)

	next := newRegistry(t, c, "w", time.Minute)
	heartbeat(t, next)

	err := old.Heartbeat(ctx)
	var dup *DuplicateIDError
	require.ErrorAs(t, err, &dup)
	require.True(t, dup.TakenOver)
	require.Equal(t, next.Info(), dup.Holder)
	require.Contains(t, err.Error(), "was taken over by another worker")

	require.NoError(t, old.Leave(ctx))
	require.Equal(t, []string{"w"}, members(t, next).Nodes)
	claim, ok, err := next.Claim(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, next.Info(), claim.Info)

	// The holder's own Leave removes both.
	require.NoError(t, next.Leave(ctx))
	require.Empty(t, members(t, old).Nodes)
	_, ok, err = next.Claim(ctx)
	require.NoError(t, err)
	require.False(t, ok)
}

// WaitForID lets a worker restarted after a crash take its id back once the
// dead incarnation's claim expires.
func TestRealWaitForIDAfterCrash(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	crashed := newRegistry(t, c, "w", 300*time.Millisecond)
	heartbeat(t, crashed) // then nothing: kill -9

	restarted := newRegistry(t, c, "w", 300*time.Millisecond)
	require.ErrorIs(t, restarted.Heartbeat(ctx), ErrDuplicateID, "the dead claim is still there")
	var waited []Claim
	start := time.Now()
	require.NoError(t, restarted.WaitForID(ctx, 20*time.Millisecond, func(c Claim) { waited = append(waited, c) }))
	require.Less(t, time.Since(start), 2*time.Second)
	require.Len(t, waited, 1)
	require.Equal(t, crashed.Info(), waited[0].Info)
	heartbeat(t, restarted)
	require.Equal(t, []string{"w"}, members(t, restarted).Nodes)
}

// WaitForID refuses an id whose holder keeps heartbeating.
func TestRealWaitForIDLiveHolder(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	live := newRegistry(t, c, "w", 300*time.Millisecond)
	heartbeat(t, live)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ticker := time.NewTicker(50 * time.Millisecond)
		defer ticker.Stop()
		for {
			select {
			case <-stop:
				return
			case <-ticker.C:
				_ = live.Heartbeat(ctx)
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	second := newRegistry(t, c, "w", 300*time.Millisecond)
	err := second.WaitForID(ctx, 20*time.Millisecond, nil)
	var dup *DuplicateIDError
	require.ErrorAs(t, err, &dup)
	require.Equal(t, live.Info(), dup.Holder)
}

func TestWaitForIDFreeOrOwn(t *testing.T) {
	_, c := newMini(t)
	ctx := context.Background()
	a := newRegistry(t, c, "a", 10*time.Second)
	require.NoError(t, a.WaitForID(ctx, time.Millisecond, func(Claim) { t.Fatal("waited for a free id") }))
	heartbeat(t, a)
	require.NoError(t, a.WaitForID(ctx, time.Millisecond, func(Claim) { t.Fatal("waited for its own id") }))
	require.Error(t, a.WaitForID(ctx, 0, nil))

	// A claim that never expires is not waited for.
	b := newRegistry(t, c, "b", 10*time.Second)
	require.NoError(t, c.Set(ctx, testKeys.Node("b"), `{"id":"b","host":"h","pid":7}`, 0).Err())
	err := b.WaitForID(ctx, time.Millisecond, nil)
	require.ErrorIs(t, err, ErrDuplicateID)
	require.Contains(t, err.Error(), "host h, pid 7")
	require.ErrorIs(t, b.Heartbeat(ctx), ErrDuplicateID, "a legacy or foreign entry is another holder too")
}

func TestWaitForIDStopsWithContext(t *testing.T) {
	mr, c := newMini(t)
	a := newRegistry(t, c, "a", 10*time.Second)
	heartbeat(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	b := newRegistry(t, c, "a", 10*time.Second)
	err := b.WaitForID(ctx, time.Millisecond, func(Claim) { cancel() })
	require.ErrorIs(t, err, context.Canceled)

	mr.SetError("LOADING Redis is loading")
	err = b.WaitForID(context.Background(), time.Millisecond, nil)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrDuplicateID), "a failed read is not a duplicate")
}

func TestIncarnation(t *testing.T) {
	_, c := newMini(t)
	a := newRegistry(t, c, "a", 10*time.Second)
	require.Len(t, a.Incarnation(), 16)
	require.NoError(t, ValidateIncarnation(a.Incarnation()))
	require.Equal(t, a.Incarnation(), a.Info().Incarnation)
	require.Equal(t, int64(10_000), a.Info().TTLMs)

	r, err := New(Config{Client: c, ID: "a", Incarnation: "abc123"})
	require.NoError(t, err)
	require.Equal(t, "abc123", r.Incarnation())
	for _, bad := range []string{"a.b", "a#b", "a-b", string(make([]byte, 65))} {
		_, err := New(Config{Client: c, ID: "a", Incarnation: bad})
		require.ErrorIs(t, err, ErrInvalidConfig, bad)
	}
}

// TestRealSetWeight: a weight set at runtime reaches the Info key at the
// next heartbeat; the id stays this incarnation's throughout (another
// registry with the id is still refused, a restart's WaitForID sees the
// id as its own), and Leave deletes the key whether or not a heartbeat
// wrote the new weight yet.
func TestRealSetWeight(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	r := newRegistry(t, c, "w", time.Minute)
	heartbeat(t, r)
	require.ErrorIs(t, r.SetWeight(5000), ErrInvalidConfig)

	require.NoError(t, r.SetWeight(0.5))
	require.Equal(t, 0.5, r.Info().Weight)
	infos, err := r.Get(ctx, "w")
	require.NoError(t, err)
	require.Zero(t, infos[0].Weight, "not written before the next heartbeat")
	require.NoError(t, r.WaitForID(ctx, time.Millisecond, nil), "the key still holds this incarnation's last claim")
	heartbeat(t, r)
	infos, err = r.Get(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 0.5, infos[0].Weight)
	require.Equal(t, 0.5, infos[0].PlanWeight())

	other := newRegistry(t, c, "w", time.Minute)
	require.ErrorIs(t, other.Heartbeat(ctx), ErrDuplicateID, "a weight change opens the id to no one else")

	// Changed again and left before a heartbeat wrote it: the key goes.
	require.NoError(t, r.SetWeight(0.25))
	require.NoError(t, r.Leave(ctx))
	n, err := c.Exists(ctx, r.keys.Node("w")).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestRealClaimComparesIncarnations: the claim and Leave take the key as
// this registry's whenever it holds an Info of its incarnation, whatever
// else it says (a weight whose claim reply was lost, then changed again),
// and as another's when it holds another incarnation or no Info at all.
func TestRealClaimComparesIncarnations(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	r := newRegistry(t, c, "w", time.Minute)
	heartbeat(t, r)
	key := r.keys.Node("w")

	// A claim wrote weight 0.5 but its reply was lost; the weight changes again.
	lost := r.Info()
	lost.Weight = 0.5
	b, err := json.Marshal(lost)
	require.NoError(t, err)
	require.NoError(t, c.Set(ctx, key, b, time.Minute).Err())
	require.NoError(t, r.SetWeight(0.25))
	heartbeat(t, r)
	infos, err := r.Get(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, 0.25, infos[0].Weight)

	other := newRegistry(t, c, "w", time.Minute).Info()
	for name, v := range map[string]string{"another incarnation": mustJSON(t, other), "not an Info": "garbage", "no incarnation": `{"id":"w"}`} {
		require.NoError(t, c.Set(ctx, key, v, time.Minute).Err())
		require.ErrorIs(t, r.Heartbeat(ctx), ErrDuplicateID, name)
		require.NoError(t, r.Leave(ctx))
		got, err := c.Get(ctx, key).Result()
		require.NoError(t, err)
		require.Equal(t, v, got, "%s: Leave keeps another's key", name)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}

// TestRealSetBehind: why a worker is behind reaches the Info key at the
// next heartbeat (status shows it), and clears the same way.
func TestRealSetBehind(t *testing.T) {
	c := redistest.Start(t).Client(t)
	ctx := context.Background()
	r := newRegistry(t, c, "w", time.Minute)
	heartbeat(t, r)
	require.NoError(t, r.SetBehind("host-limit (host t:80): runs 10 of 20 polls/s due"))
	heartbeat(t, r)
	infos, err := r.Get(ctx, "w")
	require.NoError(t, err)
	require.Equal(t, "host-limit (host t:80): runs 10 of 20 polls/s due", infos[0].Behind)
	require.NoError(t, r.SetBehind(""))
	heartbeat(t, r)
	infos, err = r.Get(ctx, "w")
	require.NoError(t, err)
	require.Empty(t, infos[0].Behind)
}
