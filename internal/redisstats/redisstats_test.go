package redisstats

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDeltaAndCalls(t *testing.T) {
	before := Stats{CPUSeconds: 1.5, UsedMemory: 100, Commands: map[string]CommandStat{
		"get": {Calls: 10, Usec: 50}, "info": {Calls: 1, Usec: 9}, "set": {Calls: 4, Usec: 8}}}
	after := Stats{CPUSeconds: 2, UsedMemory: 160, Commands: map[string]CommandStat{
		"get": {Calls: 15, Usec: 70}, "info": {Calls: 2, Usec: 18}, "set": {Calls: 4, Usec: 8}, "incr": {Calls: 3, Usec: 6}}}
	d := after.Delta(before)
	require.Equal(t, map[string]CommandStat{"get": {5, 20}, "info": {1, 9}, "incr": {3, 6}}, d.Commands,
		"unchanged commands are left out")
	require.Equal(t, int64(8), d.Calls(), "INFO is not counted")
	require.Equal(t, int64(60), d.UsedMemory)
	require.Equal(t, 500*time.Millisecond, d.CPU())
}

func TestScripts(t *testing.T) {
	st := Stats{Commands: map[string]CommandStat{
		"evalsha": {Calls: 7, Usec: 70}, "eval": {Calls: 1, Usec: 30}, "get": {Calls: 5, Usec: 5}}}
	require.Equal(t, CommandStat{Calls: 8, Usec: 100}, st.Scripts(), "EVAL and EVALSHA, nothing else")
	require.Equal(t, CommandStat{}, Stats{}.Scripts())
}
