package nodes

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// ErrDuplicateID is matched (errors.Is) by every error that reports that
// this registry's node id is claimed by another incarnation: another process
// running with the same id, or one that took the id over while this one was
// not heartbeating. It is never transient: the caller must stop working
// under that id.
var ErrDuplicateID = errors.New("nodes: duplicate node id")

// DuplicateIDError says who else claims a node id; it matches ErrDuplicateID.
type DuplicateIDError struct {
	// ID is the node id both claim.
	ID string
	// Holder is the other claimant's Info, as far as it could be decoded;
	// zero if its entry is not pollworker's JSON.
	Holder Info
	// TTL is how long the other claim lasts without another heartbeat;
	// negative if it never expires.
	TTL time.Duration
	// TakenOver is set when this registry held the id before: it lost it
	// while it was not heartbeating (paused or cut off for longer than its
	// TTL) and another incarnation claimed it since.
	TakenOver bool
}

// Error describes the other claimant.
func (e *DuplicateIDError) Error() string {
	verb := "is in use by another live worker"
	if e.TakenOver {
		verb = "was taken over by another worker while this one was not heartbeating"
	}
	return fmt.Sprintf("%s: id %q %s (%s)", ErrDuplicateID, e.ID, verb, e.Holder.describe())
}

// Is makes errors.Is(err, ErrDuplicateID) true.
func (e *DuplicateIDError) Is(target error) bool { return target == ErrDuplicateID }

// describe names a worker for people: host, pid, start, incarnation.
func (i Info) describe() string {
	var parts []string
	if i.Host != "" {
		parts = append(parts, "host "+i.Host)
	}
	if i.PID != 0 {
		parts = append(parts, fmt.Sprintf("pid %d", i.PID))
	}
	if !i.Started.IsZero() {
		parts = append(parts, "started "+i.Started.UTC().Format(time.RFC3339))
	}
	if i.Incarnation != "" {
		parts = append(parts, "incarnation "+i.Incarnation)
	}
	if len(parts) == 0 {
		return "unknown holder"
	}
	return strings.Join(parts, ", ")
}

// Claim is who claims a node id in Redis and until when.
type Claim struct {
	// Info is the claimant's Info; zero if its entry is not valid JSON.
	Info Info
	// Raw is the entry's value.
	Raw string
	// TTL is how long the claim lasts without another heartbeat; negative
	// if it never expires.
	TTL time.Duration
	// ExpiryMs is the claim's expiry in Redis server milliseconds (server
	// time + TTL); it moves forward exactly when the claimant heartbeats.
	ExpiryMs int64
}

// Claim reads, read-only, who claims this registry's id; ok is false when
// nobody does.
func (r *Registry) Claim(ctx context.Context) (c Claim, ok bool, err error) {
	reply, err := holderScript.Run(ctx, r.client, []string{r.keys.Node(r.id)}).Slice()
	if err != nil {
		return Claim{}, false, fmt.Errorf("claim of %s: %w", r.id, err)
	}
	if len(reply) != 3 {
		return Claim{}, false, fmt.Errorf("claim of %s: %w: %d elements", r.id, ErrUnexpectedReply, len(reply))
	}
	raw, isString := reply[0].(string)
	pttl, err1 := toInt64(reply[1])
	now, err2 := toInt64(reply[2])
	if err := errors.Join(err1, err2); err != nil {
		return Claim{}, false, fmt.Errorf("claim of %s: %w: %w", r.id, ErrUnexpectedReply, err)
	}
	if !isString || pttl == -2 {
		return Claim{}, false, nil
	}
	c = Claim{Raw: raw, Info: decodeInfo(raw), TTL: time.Duration(pttl) * time.Millisecond, ExpiryMs: now + pttl}
	if pttl < 0 {
		c.TTL, c.ExpiryMs = -1, -1
	}
	return c, true, nil
}

// decodeInfo decodes an Info entry, zero if it is not valid JSON.
func decodeInfo(raw string) Info {
	var info Info
	if json.Unmarshal([]byte(raw), &info) != nil {
		return Info{}
	}
	return info
}

// WaitForID returns once this registry may claim its id: at once when
// nobody claims it (or this registry does), or when the other claim expires
// without being renewed, which is how a worker restarted after a crash
// (kill -9) under the same id gets it back, after at most one TTL. If the
// other claimant heartbeats meanwhile it is alive, and WaitForID returns a
// *DuplicateIDError. It reads the claim every period; onWait, if not nil,
// is called once, in the calling goroutine, when it starts waiting. A read
// that fails returns its error (never read as "free"); ctx's error is
// returned when ctx ends first.
func (r *Registry) WaitForID(ctx context.Context, every time.Duration, onWait func(Claim)) error {
	if every <= 0 {
		return fmt.Errorf("wait for id %s: period %v must be positive", r.id, every)
	}
	prev, ok, err := r.Claim(ctx)
	if err != nil {
		return err
	}
	if !ok || prev.Info.Incarnation == r.Incarnation() {
		return nil
	}
	if prev.TTL < 0 {
		return &DuplicateIDError{ID: r.id, Holder: prev.Info, TTL: prev.TTL}
	}
	if onWait != nil {
		onWait(prev)
	}
	ticker := time.NewTicker(every)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
		cur, ok, err := r.Claim(ctx)
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		// Without a heartbeat the expiry stays put (up to a millisecond of
		// rounding); a heartbeat moves it by its interval.
		if cur.Raw != prev.Raw || cur.TTL < 0 || cur.ExpiryMs > prev.ExpiryMs+expiryJitterMs {
			return &DuplicateIDError{ID: r.id, Holder: cur.Info, TTL: cur.TTL}
		}
	}
}

// expiryJitterMs is how far a claim's computed expiry may move between two
// reads without a heartbeat: TIME and PTTL round to the millisecond
// separately.
const expiryJitterMs = 2

// claim runs node_claim.lua: nil when this registry holds its id for TTL
// from now. With renew set it writes no new value, it only moves the
// expiry of the Info this incarnation holds (errClaimAbsent when none).
func (r *Registry) claim(ctx context.Context, renew bool) error {
	info, value := r.current()
	args := []any{value, r.ttl.Milliseconds(), info.Incarnation}
	if renew {
		args = append(args, "renew")
	}
	reply, err := claimScript.Run(ctx, r.client, []string{r.keys.Node(r.id)}, args...).Slice()
	if err != nil {
		return err
	}
	if len(reply) == 1 {
		switch ok, _ := toInt64(reply[0]); ok {
		case 1:
			return nil
		case 2:
			return errClaimAbsent
		}
	}
	if len(reply) != 3 {
		return fmt.Errorf("%w: claim: %v", ErrUnexpectedReply, reply)
	}
	raw, _ := reply[1].(string)
	pttl, _ := toInt64(reply[2])
	ttl := time.Duration(pttl) * time.Millisecond
	if pttl < 0 {
		ttl = -1
	}
	return &DuplicateIDError{ID: r.id, Holder: decodeInfo(raw), TTL: ttl, TakenOver: r.claimed.Load()}
}
