package nodes

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"time"

	"github.com/pollworker/pollworker/keyspace"
)

// Info describes one worker; it is stored as JSON at keyspace.Space.Node with
// the registry's TTL and read back by Registry.Get.
type Info struct {
	// ID is the node id, the member name in the node index.
	ID string `json:"id"`
	// Host is the worker's hostname.
	Host string `json:"host"`
	// PID is the worker's process id.
	PID int `json:"pid"`
	// Started is when the worker process started (RFC 3339 with nanoseconds).
	Started time.Time `json:"started"`
	// Version is the worker's build version, free text.
	Version string `json:"version,omitempty"`
	// Incarnation is random, unique to one Registry (one run of a worker);
	// empty in entries written before incarnations existed.
	Incarnation string `json:"incarnation,omitempty"`
	// TTLMs is the registry's TTL in milliseconds: the time since the last
	// heartbeat is TTLMs minus the time left before expiry. Zero if unknown.
	TTLMs int64 `json:"ttl_ms,omitempty"`
	// Weight is the worker's declared capacity relative to its peers (the
	// planner's assign.Member.Weight); 0 (absent) means 1.
	Weight float64 `json:"weight,omitempty"`
	// Labels are the worker's labels (--labels): a session with a selector
	// is placed only on workers whose labels match it. Fixed for the
	// process's life.
	Labels Labels `json:"labels,omitempty"`
	// Sessions is the session namespace the worker reads
	// (keyspace.Space.SessionNamespace): its Registry's. Planners leave a
	// worker that reads another namespace out (it could not take the
	// sessions planned onto it); empty in the entries of workers that
	// predate it, which count as reading the same.
	Sessions string `json:"sessions,omitempty"`
	// BalanceSlack is the load bound the worker plans with
	// (poller.Config.BalanceSlack; negative: off). Planners plan with the
	// slack the members agree on (fleet.AgreedSlack); 0 in the entries of
	// workers that predate it.
	BalanceSlack float64 `json:"balance_slack,omitempty"`
	// Behind says why the worker is behind, as of its last heartbeat
	// (poller.PollStats.Overload); empty while it keeps up.
	Behind string `json:"behind,omitempty"`
}

// PlanWeight is the weight the planner gives the worker: Weight, or 1 when
// unset or invalid.
func (i Info) PlanWeight() float64 {
	if ValidateWeight(i.Weight) != nil || i.Weight == 0 {
		return 1
	}
	return i.Weight
}

// MaxWeight bounds a worker's weight: a weight 1000 times its peers' is a
// typo, not a capacity.
const MaxWeight = 1000

// ValidateWeight accepts 0 (meaning 1) and finite weights from 0.001 to
// MaxWeight.
func ValidateWeight(w float64) error {
	if w == 0 || (w >= 0.001 && w <= MaxWeight) {
		return nil
	}
	return fmt.Errorf("weight %v must be from 0.001 to %d (0 means 1)", w, MaxWeight)
}

// incarnationLen is the length of NewIncarnation's ids: 16 hex digits.
const incarnationLen = 16

// NewIncarnation returns a fresh random incarnation: 16 hex digits (64
// random bits).
func NewIncarnation() string {
	var b [incarnationLen / 2]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read crashes the program instead
	return hex.EncodeToString(b[:])
}

// ValidateIncarnation accepts 1 to 64 letters and digits, so that an
// incarnation can sit between separators in other values (lease owners).
func ValidateIncarnation(s string) error {
	if s == "" || len(s) > 64 {
		return fmt.Errorf("incarnation %q must have 1 to 64 letters or digits", s)
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z') {
			return fmt.Errorf("incarnation %q must have 1 to 64 letters or digits", s)
		}
	}
	return nil
}

// processStart approximates the process start time: it is set once when the
// package initialises and never changes.
var processStart = time.Now().Round(0).UTC()

// maxHostLen bounds the hostname part of DefaultID, keeping the id (and a
// SuffixedID of it) far below keyspace.MaxIDLen.
const maxHostLen = 100

// DefaultID returns a node id people can read: this machine's hostname
// (the pod name under Kubernetes, where every replica has its own),
// mapped to the bytes keyspace.ValidateID allows (others become '-';
// an empty hostname becomes "node"; at most 100 bytes). It is the same
// for every process on one host: two workers on one host need their own
// ids (--id), or the second is refused at start while the first is live
// (Registry.WaitForID, ErrDuplicateID). Restarts need no new id: the
// Incarnation tells them apart.
func DefaultID() string { return sanitizeHost(hostname()) }

// SuffixedID returns base followed by "-" and 4 random hex digits: an id
// for a second process on a host whose DefaultID a live worker holds.
func SuffixedID(base string) string {
	var b [2]byte
	_, _ = rand.Read(b[:]) // never fails: crypto/rand.Read crashes the program instead
	return base + "-" + hex.EncodeToString(b[:])
}

// sanitizeHost maps host to the bytes keyspace.ValidateID allows.
func sanitizeHost(host string) string {
	if len(host) > maxHostLen {
		host = host[:maxHostLen]
	}
	if host == "" {
		return "node"
	}
	b := []byte(host)
	for i, c := range b {
		if keyspace.ValidateID(string(c)) != nil {
			b[i] = '-'
		}
	}
	return string(b)
}

func hostname() string {
	h, _ := os.Hostname()
	return h
}
