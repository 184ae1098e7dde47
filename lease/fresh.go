package lease

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/keyspace"
	"github.com/pollworker/pollworker/scripts/lua"
)

// MarkFresh declares that no lease was ever granted in the keyspace keys on
// this Redis: a new deployment, or a test's or demo's own server. It writes
// the loss markers that are missing without a quarantine, so that the first
// acquisitions do not wait Config.LossQuarantine (from inside Redis a
// keyspace never used and one that lost its data look the same). Markers
// that exist are left alone. It reports how many it wrote.
//
// Never call it on a keyspace that may have lost data while workers ran:
// it would lift the loss quarantine, and a worker that held a lease before
// the loss could poll alongside a successor until its next renewal.
func MarkFresh(ctx context.Context, c Client, keys keyspace.Space) (int, error) {
	if err := keys.Validate(); err != nil {
		return 0, fmt.Errorf("mark fresh: %w", err)
	}
	script := redis.NewScript(lua.Fresh)
	slots := []uint16{0}
	_, cluster := c.(*redis.ClusterClient)
	if cluster {
		slots = make([]uint16, 16384)
		for i := range slots {
			slots[i] = uint16(i)
		}
	}
	if err := script.Load(ctx, c).Err(); err != nil {
		return 0, fmt.Errorf("mark fresh: %w", err)
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(slots))
	for i, s := range slots {
		ks := []string{keys.Epoch(s)}
		if cluster {
			ks = append(ks, keys.EpochConfirmed(s))
		}
		cmds[i] = script.EvalSha(ctx, pipe, ks)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("mark fresh: %w", err)
	}
	n := 0
	for _, cmd := range cmds {
		if v, _ := cmd.Int(); v == 1 {
			n++
		}
	}
	return n, nil
}
