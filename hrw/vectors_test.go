package hrw

import (
	"bytes"
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/vectors.json from the current code")

const vectorsFile = "vectors.json"

// vectors pins the hash function for reimplementations in other languages.
// Hashes and scores are lower-case hex without 0x.
type vectors struct {
	Comment  string       `json:"comment"`
	Keys     []keyVector  `json:"keys"`
	Nodes    []nodeVector `json:"nodes"`
	Owners   []owner      `json:"owners"`
	Weighted weightedSet  `json:"weighted"`
}

type keyVector struct {
	Key     string `json:"key"`
	FNV1a64 string `json:"fnv1a64"`
}

type nodeVector struct {
	ID       string  `json:"id"`
	Weight   float64 `json:"weight,omitempty"`
	NodeHash string  `json:"node_hash"`
}

type owner struct {
	Key string `json:"key"`
	// Scores maps node id to the integer score of (key, node).
	Scores map[string]string `json:"scores,omitempty"`
	Owner  string            `json:"owner"`
	Top3   []string          `json:"top3"`
}

type weightedSet struct {
	Nodes  []nodeVector `json:"nodes"`
	Owners []owner      `json:"owners"`
}

var vectorKeys = []string{
	"", "a", "b", "foobar", "session-1", "session-2", "session-10", "session-100000",
	"0b7c6a9e-3f1d-4c2a-9e8b-5d4f3a2b1c0d",
	"6f9619ff-8b86-d011-b42d-00c04fc964ff",
	"f47ac10b-58cc-4372-a567-0e02b2c3d479",
	"tenant/a:poll@1", "ключ",
}

var vectorNodes = []string{"worker-a", "worker-b", "worker-c", "worker-d", "worker-e"}

var vectorWeights = []float64{1, 2, 0.5, 1, 3}

func hex64(x uint64) string { return fmt.Sprintf("%016x", x) }

func buildVectors(t *testing.T) vectors {
	t.Helper()
	v := vectors{Comment: "hrw test vectors: key hash = FNV-1a 64 of the key bytes; node_hash = fmix64(FNV-1a 64 of id); " +
		"score = fmix64(key hash ^ node_hash); weighted score = -weight/ln((float64(score>>12)+0.5)/2^52). " +
		"Highest score wins, ties to the smaller id. Regenerate with: go test ./hrw -update"}
	for _, k := range vectorKeys {
		v.Keys = append(v.Keys, keyVector{Key: k, FNV1a64: hex64(HashKey(k))})
	}
	tb := NewIDs(vectorNodes...)
	weightedNodes := make([]Node, len(vectorNodes))
	for i, id := range vectorNodes {
		v.Nodes = append(v.Nodes, nodeVector{ID: id, NodeHash: hex64(hashNode(id))})
		weightedNodes[i] = Node{ID: id, Weight: vectorWeights[i]}
		v.Weighted.Nodes = append(v.Weighted.Nodes, nodeVector{ID: id, Weight: vectorWeights[i], NodeHash: hex64(hashNode(id))})
	}
	wt := mustNew(t, weightedNodes...)
	for _, k := range vectorKeys {
		scores := make(map[string]string)
		for i, id := range tb.Nodes() {
			scores[id] = hex64(tb.score(HashKey(k), i))
		}
		o, _ := tb.Owner(k)
		v.Owners = append(v.Owners, owner{Key: k, Scores: scores, Owner: o, Top3: tb.Rank(k, 3)})
		wo, _ := wt.Owner(k)
		v.Weighted.Owners = append(v.Weighted.Owners, owner{Key: k, Owner: wo, Top3: wt.Rank(k, 3)})
	}
	return v
}

func TestVectors(t *testing.T) {
	path := filepath.Join("testdata", vectorsFile)
	got := buildVectors(t)
	if *update {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		enc.SetIndent("", "  ")
		require.NoError(t, enc.Encode(got))
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		t.Logf("wrote %s", path)
	}
	b, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./hrw -update to create it")
	var want vectors
	require.NoError(t, json.Unmarshal(b, &want))
	require.Equal(t, want, got)

	// The pinned owners must follow from the pinned scores by the documented
	// rule, so the file stands on its own for another implementation.
	for _, o := range want.Owners {
		ids := slices.Collect(maps.Keys(o.Scores))
		slices.SortFunc(ids, func(a, b string) int {
			sa, err := strconv.ParseUint(o.Scores[a], 16, 64)
			require.NoError(t, err)
			sb, err := strconv.ParseUint(o.Scores[b], 16, 64)
			require.NoError(t, err)
			return cmp.Or(cmp.Compare(sb, sa), cmp.Compare(a, b))
		})
		require.Equal(t, ids[:3], o.Top3, "%q", o.Key)
		require.Equal(t, ids[0], o.Owner, "%q", o.Key)
	}
}
