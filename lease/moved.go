package lease

import (
	"bufio"
	"context"
	"errors"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// askMasters is what acquire.lua returns, instead of its usual reply, when
// the loss marker it found may have been moved by a slot migration: it
// wants the run ids of the masters (settledMasters) to decide.
const askMasters = "<masters?>"

// errMastersUnread is the error of the sessions of an acquire call that
// asked for the masters when a master did not answer: nothing was
// written, and the sessions are asked for again in a later call.
var errMastersUnread = errors.New("a slot's loss marker may have moved, and not every master's run id could be read: not acquired now")

// asksMasters reports whether c's reply is askMasters.
func (c *call) asksMasters() bool {
	if c.err != nil {
		return false
	}
	raw, err := c.cmd.Slice()
	return err == nil && len(raw) == 1 && raw[0] == askMasters
}

// withMasters replaces the '-' of an acquire call's masters argument
// (ARGV[3]) by the run ids of masters, separated by spaces (" " for none),
// for the call to be sent again.
func (c *call) withMasters(masters []string) {
	numKeys, _ := c.args[2].(int)
	ids := strings.Join(masters, " ")
	if ids == "" {
		ids = " "
	}
	c.args[3+numKeys+2] = ids
	c.cmd, c.err = nil, nil
}

// settledMasters asks every master of the cluster, now, for its run id, and
// returns those of the masters that have been masters since they started
// (never promoted from replica: see settledMaster). complete is false when
// a master did not answer (a timeout on a loaded server): a marker it
// wrote would then read as a loss and start a quarantine of the slot for
// a move, so the caller sends nothing and tries again later.
func (m *Manager) settledMasters(ctx context.Context) (ids []string, complete bool) {
	cc, ok := m.client.(*redis.ClusterClient)
	if !ok {
		return nil, true
	}
	var mu sync.Mutex
	complete = true
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		text, err := c.Info(ctx, "server", "replication").Result()
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			complete = false
			return nil
		}
		if id, ok := settledMaster(text); ok {
			ids = append(ids, id)
		}
		return nil
	})
	return ids, complete && err == nil
}

// settledMaster reads the text of INFO server and replication: the run id
// of a master that was never promoted from replica since it started
// (second_repl_offset -1), so that it has held its data without a loss
// (a restart gives a new run id, a failover a promotion); ok is false for
// any other server or an incomplete text.
func settledMaster(info string) (runID string, ok bool) {
	fields := infoFields(info)
	runID = fields["run_id"]
	return runID, runID != "" && fields["role"] == "master" && fields["second_repl_offset"] == "-1"
}

// infoFields returns the "field:value" lines of an INFO reply by field.
func infoFields(info string) map[string]string {
	fields := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		if k, v, found := strings.Cut(strings.TrimSpace(sc.Text()), ":"); found {
			fields[k] = v
		}
	}
	return fields
}
