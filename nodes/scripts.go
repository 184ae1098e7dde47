package nodes

import (
	"github.com/redis/go-redis/v9"

	"github.com/pollworker/pollworker/scripts/lua"
)

// The scripts live in scripts/lua (node_*.lua, each with a KEYS/ARGV
// header). They are immutable after init; redis.Script is safe for
// concurrent use.
var (
	heartbeatScript = redis.NewScript(lua.NodeHeartbeat)
	membersScript   = redis.NewScript(lua.NodeMembers)
	claimScript     = redis.NewScript(lua.NodeClaim)
	unclaimScript   = redis.NewScript(lua.NodeUnclaim)
	leaveScript     = redis.NewScript(lua.NodeLeave)
	holderScript    = redis.NewScript(lua.NodeHolder)
)
