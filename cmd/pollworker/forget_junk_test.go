package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/pollworker/pollworker/keyspace"
)

// TestJunkMembersInStatusAndForget: entries of the node index that are not
// live workers are not listed as live by status (before, every one was, and
// took sessions), are listed as ignored, and forget removes them, the
// invalid ones too (before: "invalid worker id"), touching nothing else.
func TestJunkMembersInStatusAndForget(t *testing.T) {
	f := healthyFleet(t)
	ctx := ctxT(t)
	until := float64(time.Now().Add(time.Hour).UnixMilli())
	long := strings.Repeat("x", 5000)
	for _, j := range []string{"ghost", "bad id with spaces", "", long, "ünï©ødé"} {
		require.NoError(t, f.client.ZAdd(ctx, keyspace.Space{}.NodeIndex(), redis.Z{Score: until, Member: j}).Err())
	}
	status := func() clusterStatus {
		t.Helper()
		r := runApp(t, "status", "--redis-url", f.url, "--json")
		require.Equal(t, exitOK, r.code, r.stderr)
		var st clusterStatus
		require.NoError(t, json.Unmarshal([]byte(r.stdout), &st), r.stdout)
		return st
	}
	st := status()
	var live []string
	for _, n := range st.Nodes {
		live = append(live, n.ID)
	}
	require.Equal(t, []string{"w1", "w2", "w3"}, live)
	require.Len(t, st.JunkMembers, 5)
	text := runApp(t, "status", "--redis-url", f.url)
	require.Contains(t, text.stdout, "ignored node index entries (not live workers; pollworker forget removes them): 5\n")
	require.Contains(t, text.stdout, `  "bad id with spaces": not a valid worker id: `)
	require.Contains(t, text.stdout, "  ghost: no heartbeat key poll:node:ghost\n")

	forget := func(member string) result {
		t.Helper()
		return runApp(t, "forget", "--redis-url", f.url, member)
	}
	for _, j := range []string{"bad id with spaces", "", long, "ünï©ødé"} {
		r := forget(j)
		require.Equal(t, exitOK, r.code, r.stderr)
		require.Contains(t, r.stdout, "removed the invalid entry ")
	}
	r := forget("no such entry")
	require.Equal(t, exitUsage, r.code)
	require.Contains(t, r.stderr, "and no such entry in the node index")
	r = forget("ghost")
	require.Equal(t, exitOK, r.code, r.stderr)
	st = status()
	require.Empty(t, st.JunkMembers)
	require.Len(t, st.Nodes, 3)
	code, rep, stderr := f.check(t, "--grace", "0")
	require.Equal(t, exitOK, code, stderr)
	require.True(t, rep.OK)
}
