package session

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/pollworker/pollworker/keyspace"
)

func TestNewStore(t *testing.T) {
	_, err := NewStore(nil, keys)
	require.ErrorContains(t, err, "nil client")
	_, c, _ := newMini(t)
	_, err = NewStore(c, keyspace.Space{Prefix: "a*"})
	require.ErrorIs(t, err, keyspace.ErrInvalidID)
}

func TestRoundTrip(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)
	require.Equal(t, int64(0), rev(t, s))

	want := sess("s1")
	want.Labels = map[string]string{"team": "a"}
	require.NoError(t, s.Put(ctx, want))
	require.Equal(t, int64(1), rev(t, s))
	got, err := s.Get(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, want, got)
	members, err := m.Members(keys.SessionBucketOf("s1"))
	require.NoError(t, err)
	require.Equal(t, []string{"s1"}, members)

	require.NoError(t, s.Pause(ctx, "s1"))
	require.Equal(t, int64(2), rev(t, s))
	got, err = s.Get(ctx, "s1")
	require.NoError(t, err)
	want.Paused = true
	require.Equal(t, want, got)

	// Pausing again changes nothing but still bumps the revision.
	require.NoError(t, s.Pause(ctx, "s1"))
	require.Equal(t, int64(3), rev(t, s))

	require.NoError(t, s.Resume(ctx, "s1"))
	require.Equal(t, int64(4), rev(t, s))
	got, err = s.Get(ctx, "s1")
	require.NoError(t, err)
	want.Paused = false
	require.Equal(t, want, got)
	raw, err := m.Get(keys.Session("s1"))
	require.NoError(t, err)
	require.NotContains(t, raw, "paused")

	want.Interval = Duration(time.Minute)
	require.NoError(t, s.Put(ctx, want))
	require.Equal(t, int64(5), rev(t, s))
	got, err = s.Get(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, want, got)

	require.NoError(t, s.Delete(ctx, "s1"))
	require.Equal(t, int64(6), rev(t, s))
	require.False(t, m.Exists(keys.Session("s1")))
	require.False(t, m.Exists(keys.SessionBucketOf("s1")))
	_, err = s.Get(ctx, "s1")
	require.ErrorIs(t, err, ErrNotFound)

	// A second Delete finds nothing, and still bumps (a retry heals a
	// Delete whose bump failed).
	require.ErrorIs(t, s.Delete(ctx, "s1"), ErrNotFound)
	require.Equal(t, int64(7), rev(t, s))
	require.ErrorIs(t, s.Pause(ctx, "s1"), ErrNotFound)
	require.ErrorIs(t, s.Resume(ctx, "s1"), ErrNotFound)
	require.Equal(t, int64(7), rev(t, s))
}

func TestWritesRejectInvalid(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)
	tests := []struct {
		name string
		give Session
	}{
		{"invalid id", Session{ID: "a*", URL: "http://h", Interval: Duration(time.Second)}},
		{"no url", Session{ID: "s1", Interval: Duration(time.Second)}},
		{"small interval", Session{ID: "s1", URL: "http://h", Interval: Duration(time.Millisecond)}},
		{"oversize", Session{ID: "s1", URL: "http://h", Interval: Duration(time.Second), Labels: map[string]string{"x": strings.Repeat("x", MaxValueBytes)}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.ErrorIs(t, s.Put(ctx, tt.give), ErrMalformed)
		})
	}
	require.Empty(t, m.Keys())

	for _, id := range []string{"", "a*", "a{b}", "a\r\nb"} {
		require.ErrorIs(t, s.Pause(ctx, id), keyspace.ErrInvalidID)
		_, err := s.Get(ctx, id)
		require.ErrorIs(t, err, keyspace.ErrInvalidID)
	}
	require.ErrorIs(t, s.Delete(ctx, ""), keyspace.ErrInvalidID)
	require.Empty(t, m.Keys())
}

func TestDeleteInvalidID(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)
	// An invalid id that reached the index by hand can still be removed.
	_, err := m.SetAdd(keys.SessionBucketOf("bad id*"), "bad id*")
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, "bad id*"))
	require.False(t, m.Exists(keys.SessionBucketOf("bad id*")))
}

func TestPauseKeepsUnknownFields(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)
	require.NoError(t, m.Set(keys.Session("s1"), `{"url":"http://h","interval":1000,"Paused":false,"future":{"a":[1,2]}}`))
	require.NoError(t, s.Pause(ctx, "s1"))
	raw, err := m.Get(keys.Session("s1"))
	require.NoError(t, err)
	require.JSONEq(t, `{"url":"http://h","interval":1000,"paused":true,"future":{"a":[1,2]}}`, raw)

	require.NoError(t, s.Resume(ctx, "s1"))
	raw, err = m.Get(keys.Session("s1"))
	require.NoError(t, err)
	require.JSONEq(t, `{"url":"http://h","interval":1000,"future":{"a":[1,2]}}`, raw)
}

func TestPauseMalformed(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)
	require.NoError(t, m.Set(keys.Session("s1"), `{"url":"","interval":"1s"}`))
	m.HSet(keys.Session("h"), "url", "http://h")
	require.ErrorIs(t, s.Pause(ctx, "s1"), ErrMalformed)
	require.ErrorIs(t, s.Pause(ctx, "h"), ErrMalformed)
	raw, err := m.Get(keys.Session("s1"))
	require.NoError(t, err)
	require.Equal(t, `{"url":"","interval":"1s"}`, raw)
	require.Equal(t, int64(0), rev(t, s))
}

func TestLoadSorted(t *testing.T) {
	_, _, s := newMini(t)
	ctx := ctxT(t)
	snap, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, Snapshot{Rev: 0, Sessions: []Session{}}, snap)

	for _, id := range []string{"c", "a", "b/2", "b/1"} {
		require.NoError(t, s.Put(ctx, sess(id)))
	}
	require.NoError(t, s.Pause(ctx, "a"))
	snap, err = s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(5), snap.Rev-counterStartedAt(t, s))
	require.Equal(t, []string{"a", "b/1", "b/2", "c"}, ids(snap.Sessions))
	require.True(t, snap.Sessions[0].Paused)
	require.Empty(t, snap.Malformed)

	list, problems, err := s.List(ctx)
	require.NoError(t, err)
	require.Equal(t, snap.Sessions, list)
	require.Empty(t, problems)
}

func TestLoadManyBatches(t *testing.T) {
	_, c, s := newMini(t)
	ctx := ctxT(t)
	const n = 2*PipelineLen + 17
	want := seed(t, c, n)
	snap, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, want, ids(snap.Sessions))
}

// putMalformed stores one of each kind of malformed entry and returns their
// ids, sorted, with a substring of each reason.
func putMalformed(t testing.TB, c redis.UniversalClient) map[string]string {
	t.Helper()
	ctx := ctxT(t)
	bad := map[string]string{
		"badjson":  `{"url":`,
		"nourl":    `{"interval":"1s"}`,
		"empty":    ``,
		"wrongid":  `{"id":"other","url":"http://h","interval":"1s"}`,
		"enormous": `{"url":"http://h","interval":"1s","pad":"` + strings.Repeat("x", 1<<20) + `"}`,
	}
	for id, v := range bad {
		require.NoError(t, c.Set(ctx, keys.Session(id), v, 0).Err())
		require.NoError(t, c.SAdd(ctx, keys.SessionBucketOf(id), id).Err())
	}
	require.NoError(t, c.HSet(ctx, keys.Session("hash"), "url", "http://h").Err())
	for _, id := range []string{"hash", "bad id*", "gone"} {
		require.NoError(t, c.SAdd(ctx, keys.SessionBucketOf(id), id).Err())
	}
	return map[string]string{
		"bad id*":  "id in the index: keyspace: invalid id",
		"badjson":  "invalid JSON",
		"empty":    "empty value",
		"enormous": "value has more than 65536 bytes",
		"hash":     "another Redis type",
		"nourl":    "url missing",
		"wrongid":  "differs from the key's id",
	}
}

func TestLoadMalformed(t *testing.T) {
	m, c, s := newMini(t)
	ctx := ctxT(t)
	require.NoError(t, s.Put(ctx, sess("good1")))
	require.NoError(t, s.Put(ctx, sess("zgood2")))
	want := putMalformed(t, c)
	keysBefore := m.Keys()

	snap, err := s.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"good1", "zgood2"}, ids(snap.Sessions))
	var gotIDs []string
	for _, p := range snap.Malformed {
		gotIDs = append(gotIDs, p.ID)
		require.ErrorIs(t, p.Err, ErrMalformed, p.ID)
		require.ErrorContains(t, p.Err, want[p.ID], p.ID)
	}
	require.Equal(t, []string{"bad id*", "badjson", "empty", "enormous", "hash", "nourl", "wrongid"}, gotIDs)
	// Nothing was deleted: "gone" never had a key and was skipped silently.
	require.Equal(t, keysBefore, m.Keys())
	members, err := m.Members(keys.SessionBucketOf("gone"))
	require.NoError(t, err)
	require.Contains(t, members, "gone")
}

func TestLoaderLogsOnce(t *testing.T) {
	core, logs := observer.New(zapcore.WarnLevel)
	_, c, s := newMini(t, WithLogger(zap.New(core)))
	ctx := ctxT(t)
	require.NoError(t, s.Put(ctx, sess("good")))
	want := putMalformed(t, c)
	l := NewLoader(s)

	for range 2 {
		snap, err := l.Load(ctx)
		require.NoError(t, err)
		require.Len(t, snap.Sessions, 1)
		require.Len(t, snap.Malformed, len(want))
	}
	entries := logs.TakeAll()
	require.Len(t, entries, len(want))
	for _, e := range entries {
		require.Equal(t, "malformed session skipped", e.Message)
		f := e.ContextMap()
		id, ok := f["session"].(string)
		require.True(t, ok)
		require.Contains(t, f["reason"], want[id])
	}
	require.Equal(t, len(want), l.Logged())
	require.Equal(t, len(want), l.Malformed())

	// Another malformed value at the same id is a new problem; a fixed one
	// is forgotten, and logged again if it comes back.
	require.NoError(t, c.Set(ctx, keys.Session("nourl"), `{"url":"","interval":"1s"}`, 0).Err())
	require.NoError(t, s.Put(ctx, sess("badjson")))
	_, err := l.Load(ctx)
	require.NoError(t, err)
	entries = logs.TakeAll()
	require.Len(t, entries, 1)
	require.Equal(t, "nourl", entries[0].ContextMap()["session"])
	require.Equal(t, len(want)+1, l.Logged())
	require.Equal(t, len(want)-1, l.Malformed())

	require.NoError(t, c.Set(ctx, keys.Session("badjson"), `{`, 0).Err())
	_, err = l.Load(ctx)
	require.NoError(t, err)
	entries = logs.TakeAll()
	require.Len(t, entries, 1)
	require.Equal(t, "badjson", entries[0].ContextMap()["session"])
}

func TestLoadErrors(t *testing.T) {
	m, c, s := newMini(t)
	ctx := ctxT(t)
	require.NoError(t, c.Set(ctx, keys.SessionRev(), "abc", 0).Err())
	_, err := s.Rev(ctx)
	require.ErrorIs(t, err, ErrBadRecord)
	require.ErrorContains(t, err, "key "+keys.SessionRev()+" holds no revision")
	snap, err := s.Load(ctx)
	require.NoError(t, err, "the definitions are intact: read them (a backup must still be possible)")
	require.ErrorIs(t, snap.BadRecord, ErrBadRecord)
	require.EqualValues(t, -1, snap.Rev)
	require.NoError(t, c.Del(ctx, keys.SessionRev()).Err())
	require.NoError(t, c.HSet(ctx, keys.SessionRev(), "a", "1").Err())
	snap, err = s.Load(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, snap.BadRecord, ErrBadRecord, "of the wrong type too")
	require.NoError(t, c.Del(ctx, keys.SessionRev()).Err())

	require.NoError(t, c.Set(ctx, keys.SessionRev(), "1", 0).Err())
	require.NoError(t, s.Put(ctx, sess("s1")))
	require.NoError(t, c.Set(ctx, keys.SessionBucket(7), "x", 0).Err())
	snap, err = s.Load(ctx)
	require.NoError(t, err, "a bucket of the wrong type is its own problem")
	require.Equal(t, []string{keys.SessionBucket(7)}, snap.BadBuckets)
	require.Len(t, snap.Malformed, 1)
	require.Equal(t, keys.SessionBucket(7), snap.Malformed[0].ID, "listed with the malformed entries")
	require.ErrorIs(t, snap.Malformed[0].Err, ErrMalformed)
	require.Len(t, snap.Sessions, 1, "the other buckets are read")

	m.Close()
	_, err = s.Load(ctx)
	require.Error(t, err)
	require.Error(t, s.Put(ctx, sess("s1")))
	require.Error(t, s.Pause(ctx, "s1"))
}

func TestEventsPublished(t *testing.T) {
	_, c, s := newMini(t)
	ctx := ctxT(t)
	sub := c.Subscribe(ctx, keys.Events())
	t.Cleanup(func() { _ = sub.Close() })
	_, err := sub.Receive(ctx) // the subscription confirmation
	require.NoError(t, err)

	require.NoError(t, s.Put(ctx, sess("s1")))
	require.NoError(t, s.Pause(ctx, "s1"))
	require.NoError(t, s.Delete(ctx, "s1"))
	require.NoError(t, c.SAdd(ctx, keys.SessionBucketOf("bad*"), "bad*").Err())
	require.NoError(t, s.Delete(ctx, "bad*"))
	for _, want := range []string{
		`{"type":"probe"}`, // before the first write, the store checks it may publish
		`{"type":"sessions","sessions":["s1"]}`,
		`{"type":"sessions","sessions":["s1"]}`,
		`{"type":"sessions","sessions":["s1"]}`,
		`{"type":"sessions"}`,
	} {
		msg, err := sub.ReceiveMessage(ctx)
		require.NoError(t, err)
		require.Equal(t, keys.Events(), msg.Channel)
		require.JSONEq(t, want, msg.Payload)
	}
}

func TestPauseRetriesOnConflict(t *testing.T) {
	_, c, s := newMini(t)
	ctx := ctxT(t)
	require.NoError(t, s.Put(ctx, sess("s1")))

	// A concurrent writer changes the session between Pause's read and its
	// write: the write is refused, Pause reads again, and keeps the change.
	writes := 0
	s.afterRead = func() {
		if writes++; writes == 1 {
			require.NoError(t, c.Set(ctx, keys.Session("s1"), `{"url":"http://other","interval":"2s"}`, 0).Err())
		}
	}
	require.NoError(t, s.Pause(ctx, "s1"))
	require.Equal(t, 2, writes)
	got, err := s.Get(ctx, "s1")
	require.NoError(t, err)
	require.Equal(t, Session{ID: "s1", URL: "http://other", Interval: Duration(2 * time.Second), Paused: true}, got)

	// A writer that always interferes exhausts the retries.
	before := rev(t, s)
	s.afterRead = func() {
		require.NoError(t, c.Set(ctx, keys.Session("s1"), `{"url":"http://other","interval":"2s","paused":true}`, 0).Err())
	}
	require.ErrorIs(t, s.Resume(ctx, "s1"), redis.TxFailedErr)
	require.Equal(t, before, rev(t, s))
}

// TestPutManyNothing: no sessions, no write and no revision bump, so that
// an apply that changes nothing makes no worker reread.
func TestPutManyNothing(t *testing.T) {
	m, _, s := newMini(t)
	require.NoError(t, s.PutMany(ctxT(t), nil))
	require.Empty(t, m.Keys())
	n, err := s.DeleteMany(ctxT(t), nil)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Empty(t, m.Keys())
}

func TestDeleteMany(t *testing.T) {
	m, _, s := newMini(t)
	ctx := ctxT(t)
	var all []Session
	for i := range 2*PipelineLen + 3 {
		all = append(all, sess(fmt.Sprintf("s%04d", i)))
	}
	require.NoError(t, s.PutMany(ctx, all))
	r0 := rev(t, s)
	require.Equal(t, int64(1), r0, "one bump for the whole PutMany")

	gone := []string{"s0000", "s1500", "s2002", "nosuch"}
	n, err := s.DeleteMany(ctx, gone)
	require.NoError(t, err)
	require.Equal(t, 3, n, "nosuch had nothing")
	require.Equal(t, r0+1, rev(t, s), "one bump for the whole DeleteMany")
	snap, err := s.Load(ctx)
	require.NoError(t, err)
	require.Len(t, snap.Sessions, len(all)-3)
	require.False(t, m.Exists(keys.Session("s1500")))
	_, sizes, err := s.Sizes(ctx)
	require.NoError(t, err)
	total := 0
	for _, n := range sizes {
		total += n
	}
	require.Equal(t, len(all)-3, total, "bucket sizes follow")

	_, err = s.DeleteMany(ctx, []string{"a", ""})
	require.ErrorIs(t, err, keyspace.ErrInvalidID)
}

// TestPutManyFailureStillRecorded: a PutMany that fails (here: its context
// is done) still bumps the revision with a fresh context, so that what a
// failed pipeline may have written is announced.
func TestPutManyFailureStillRecorded(t *testing.T) {
	_, _, s := newMini(t)
	require.NoError(t, s.PutMany(ctxT(t), []Session{sess("b")})) // revision 1; the session prefix claimed (Store.claim)
	ctx, cancel := context.WithCancel(ctxT(t))
	cancel()
	err := s.PutMany(ctx, []Session{sess("a")})
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int64(2), rev(t, s))
}

// TestDeleteRemovesTheHandoffMark is issue 22 item 2: what schedules a
// removed session (its handoff mark, with a backed-off due time) does not
// outlive it.
func TestDeleteRemovesTheHandoffMark(t *testing.T) {
	ctx := context.Background()
	for _, many := range []bool{false, true} {
		_, c, s := newMini(t)
		sess := Session{ID: "bo-3", URL: "http://127.0.0.1:1/typo", Interval: Duration(2 * time.Second)}
		require.NoError(t, s.Put(ctx, sess))
		require.NoError(t, c.Set(ctx, keys.Released(sess.ID), "1000:63000", time.Minute).Err()) // the layout before the records
		require.NoError(t, c.HSet(ctx, keys.Fencing(sess.ID), keyspace.FieldToken, "17", keyspace.FieldHandoff, "17:1000:99000:63000").Err())
		if many {
			n, err := s.DeleteMany(ctx, []string{sess.ID})
			require.NoError(t, err)
			require.Equal(t, 1, n)
		} else {
			require.NoError(t, s.Delete(ctx, sess.ID))
		}
		require.Zero(t, c.Exists(ctx, keys.Released(sess.ID)).Val(), "many=%v", many)
		rec, err := c.HGetAll(ctx, keys.Fencing(sess.ID)).Result()
		require.NoError(t, err)
		require.Equal(t, map[string]string{keyspace.FieldToken: "17"}, rec, "the mark goes, the token stays (many=%v)", many)
	}
}
