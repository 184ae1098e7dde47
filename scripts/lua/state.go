package lua

import _ "embed"

// StateSave writes a session's state only while the writer's lease key
// holds its owner value and no greater token wrote the stored state
// (package state).
//
//go:embed state_save.lua
var StateSave string

// StateLoad reads the state of several sessions and the server time,
// read-only (package state).
//
//go:embed state_load.lua
var StateLoad string
