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
)

// The scripts are immutable after init; redis.Script is safe for concurrent use.
var (
	heartbeatScript = redis.NewScript(heartbeatLua)
	membersScript   = redis.NewScript(membersLua)
)
