package results

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseRecordMode(t *testing.T) {
	for _, m := range []RecordMode{RecordAll, RecordChanges, RecordNone} {
		got, err := ParseRecordMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := ParseRecordMode("some")
	require.ErrorIs(t, err, ErrConfig)
	require.ErrorContains(t, err, `record mode "some" must be all, changes or none`)
}
