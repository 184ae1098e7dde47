package nodes

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed heartbeat.lua
	heartbeatLua string
	//go:embed members.lua
	membersLua string
	//go:embed claim.lua
	claimLua string
	//go:embed unclaim.lua
	unclaimLua string
	//go:embed leave.lua
	leaveLua string
	//go:embed holder.lua
	holderLua string
)

// The scripts are immutable after init; redis.Script is safe for concurrent use.
var (
	heartbeatScript = redis.NewScript(heartbeatLua)
	membersScript   = redis.NewScript(membersLua)
	claimScript     = redis.NewScript(claimLua)
	unclaimScript   = redis.NewScript(unclaimLua)
	leaveScript     = redis.NewScript(leaveLua)
	holderScript    = redis.NewScript(holderLua)
)
