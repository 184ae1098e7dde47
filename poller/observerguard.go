package poller

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// guardedObserver calls the Config's Observer and recovers a panic in any
// of its methods: logged with its stack (at error level the first time
// for each method, then at debug level) and counted (Status.ObserverPanics).
// A bug in a metrics callback then costs its metrics, not the worker's
// polls, renewals and heartbeats, as a panic in a Poll costs that poll.
type guardedObserver struct {
	o      Observer
	log    *zap.Logger
	panics *atomic.Int64 // health.observerPanics, set by assemble
	logged sync.Map      // method name -> struct{}: its first panic was logged
}

// recover is deferred by each method with its name.
func (g *guardedObserver) recover(method string) {
	r := recover()
	if r == nil {
		return
	}
	if g.panics != nil {
		g.panics.Add(1)
	}
	msg := "Observer." + method + " panicked; recovered, the worker goes on (the same method's next panics are logged at debug level)"
	if _, seen := g.logged.LoadOrStore(method, struct{}{}); seen {
		g.log.Debug("Observer."+method+" panicked again", zap.Any("panic", r))
		return
	}
	g.log.Error(msg, zap.Any("panic", r), zap.StackSkip("stack", 2))
}

func (g *guardedObserver) LeaseEvent(e Event) {
	defer g.recover("LeaseEvent")
	g.o.LeaseEvent(e)
}

func (g *guardedObserver) RenewCycle(r RenewReport) {
	defer g.recover("RenewCycle")
	g.o.RenewCycle(r)
}

func (g *guardedObserver) PollDone(p PollReport) {
	defer g.recover("PollDone")
	g.o.PollDone(p)
}

func (g *guardedObserver) Round(r RoundReport) {
	defer g.recover("Round")
	g.o.Round(r)
}

func (g *guardedObserver) RedisError(op string) {
	defer g.recover("RedisError")
	g.o.RedisError(op)
}

func (g *guardedObserver) HandoffGap(d time.Duration) {
	defer g.recover("HandoffGap")
	g.o.HandoffGap(d)
}

func (g *guardedObserver) BadData(kind string) {
	defer g.recover("BadData")
	g.o.BadData(kind)
}

func (g *guardedObserver) SlotStarted(lateness time.Duration) {
	defer g.recover("SlotStarted")
	g.o.SlotStarted(lateness)
}

func (g *guardedObserver) SlotsSkipped(n int, reason string) {
	defer g.recover("SlotsSkipped")
	g.o.SlotsSkipped(n, reason)
}
