package poller

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSchedulerOverrunPollGivesItsSlotToTheWaiting: with every slot
// taken, a poll that overran its interval (so is due again at once) queues
// behind the polls already waiting instead of keeping its slot. Before,
// the sessions whose polls overran kept every slot and the others were
// never polled.
func TestSchedulerOverrunPollGivesItsSlotToTheWaiting(t *testing.T) {
	f := newSchedFixture(t)
	f.sched.limit = 1
	a := f.start("a")
	pa := f.nextPoll()
	b := f.start("b")
	f.waitPhase(b, admitting)
	f.clock.Step(2 * schedInterval) // a overran its interval: due again at once
	close(pa.finish)
	pb := f.nextPoll()
	require.Equal(t, b, pb.w, "the slot goes to b, which waited, not back to a")
	f.waitPhase(a, admitting)
	close(pb.finish) // b overran too: a, waiting, goes first
	pa = f.nextPoll()
	require.Equal(t, a, pa.w)
	f.waitPhase(b, admitting)
	close(pa.finish)
	pb = f.nextPoll()
	require.Equal(t, b, pb.w)
	close(pb.finish)
	f.waitPhase(a, queued)
	f.waitPhase(b, queued)
	st, _, _ := f.sched.snapshot()
	require.EqualValues(t, 3, st.Deferred)
}
