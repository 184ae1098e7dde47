package session

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDecode(t *testing.T) {
	pad := strings.Repeat("x", MaxValueBytes)
	tests := []struct {
		name    string
		id      string
		give    string
		want    Session
		wantErr string // substring of the error; "" for success
	}{
		{
			name: "good",
			id:   "s1",
			give: `{"id":"s1","url":"https://example.com/x?y=1","interval":"1.5s","paused":true,"labels":{"team":"a"}}`,
			want: Session{ID: "s1", URL: "https://example.com/x?y=1", Interval: Duration(1500 * time.Millisecond), Paused: true, Labels: map[string]string{"team": "a"}},
		},
		{
			name: "id absent is taken from the key",
			id:   "tenant/a:b@c_d.e",
			give: `{"url":"http://h","interval":"10s"}`,
			want: Session{ID: "tenant/a:b@c_d.e", URL: "http://h", Interval: Duration(10 * time.Second)},
		},
		{
			name: "interval as milliseconds",
			id:   "s1",
			give: `{"url":"http://h","interval":1500}`,
			want: Session{ID: "s1", URL: "http://h", Interval: Duration(1500 * time.Millisecond)},
		},
		{
			name: "interval at the minimum",
			id:   "s1",
			give: `{"url":"http://h","interval":10}`,
			want: Session{ID: "s1", URL: "http://h", Interval: Duration(MinInterval)},
		},
		{
			name: "unknown fields ignored",
			id:   "s1",
			give: `{"url":"http://h","interval":"1s","future":{"nested":[1,2,{"a":null}]},"retries":3}`,
			want: Session{ID: "s1", URL: "http://h", Interval: Duration(time.Second)},
		},
		{
			name: "non-HTTP target",
			id:   "s1",
			give: `{"url":"redis://cache:6379/0","interval":"1m"}`,
			want: Session{ID: "s1", URL: "redis://cache:6379/0", Interval: Duration(time.Minute)},
		},
		{
			name: "opaque target",
			id:   "s1",
			give: ` {"url":"queue depth of orders","interval":"1m","labels":{}}`,
			want: Session{ID: "s1", URL: "queue depth of orders", Interval: Duration(time.Minute)},
		},
		{name: "bad JSON", id: "s1", give: `{"url":"http://h","interval":"1s"`, wantErr: "invalid JSON"},
		{name: "trailing garbage", id: "s1", give: `{"url":"http://h","interval":"1s"} x`, wantErr: "invalid JSON"},
		{name: "array", id: "s1", give: `[{"url":"http://h","interval":"1s"}]`, wantErr: "not a JSON object"},
		{name: "null", id: "s1", give: `null`, wantErr: "not a JSON object"},
		{name: "empty value", id: "s1", give: ``, wantErr: "empty value"},
		{name: "blank value", id: "s1", give: " \r\n", wantErr: "empty value"},
		{name: "wrong id", id: "s1", give: `{"id":"s2","url":"http://h","interval":"1s"}`, wantErr: `id "s2" in the value differs from the key's id "s1"`},
		{name: "empty id inside", id: "s1", give: `{"id":"","url":"http://h","interval":"1s"}`, wantErr: "differs from the key's id"},
		{name: "id of wrong type", id: "s1", give: `{"id":7,"url":"http://h","interval":"1s"}`, wantErr: `field "id"`},
		{name: "missing url", id: "s1", give: `{"interval":"1s"}`, wantErr: "url missing"},
		{name: "blank url", id: "s1", give: `{"url":"  ","interval":"1s"}`, wantErr: "url missing"},
		{name: "url of wrong type", id: "s1", give: `{"url":1,"interval":"1s"}`, wantErr: `field "url"`},
		{name: "http url without host", id: "s1", give: `{"url":"http:///path","interval":"1s"}`, wantErr: "http URL without host"},
		{name: "unparseable https url", id: "s1", give: `{"url":"https://user:hunter2@bad host/","interval":"1s"}`, wantErr: "not a valid https URL"},
		{name: "missing interval", id: "s1", give: `{"url":"http://h"}`, wantErr: "interval missing or zero"},
		{name: "null interval", id: "s1", give: `{"url":"http://h","interval":null}`, wantErr: "interval missing or zero"},
		{name: "zero interval", id: "s1", give: `{"url":"http://h","interval":"0s"}`, wantErr: "interval missing or zero"},
		{name: "negative interval", id: "s1", give: `{"url":"http://h","interval":"-1s"}`, wantErr: "interval -1s is negative"},
		{name: "negative ms", id: "s1", give: `{"url":"http://h","interval":-5}`, wantErr: "is negative"},
		{name: "too small interval", id: "s1", give: `{"url":"http://h","interval":"5ms"}`, wantErr: "interval 5ms is below the minimum 10ms"},
		{name: "too small ms", id: "s1", give: `{"url":"http://h","interval":9.5}`, wantErr: "below the minimum"},
		{name: "interval without unit", id: "s1", give: `{"url":"http://h","interval":"10"}`, wantErr: "missing unit"},
		{name: "interval of wrong type", id: "s1", give: `{"url":"http://h","interval":true}`, wantErr: "want a duration string or milliseconds"},
		{name: "interval out of range", id: "s1", give: `{"url":"http://h","interval":1e300}`, wantErr: "out of range"},
		{name: "labels of wrong type", id: "s1", give: `{"url":"http://h","interval":"1s","labels":{"a":1}}`, wantErr: `field "labels": JSON number where string was expected`},
		{name: "oversize value", id: "s1", give: `{"url":"http://h","interval":"1s","pad":"` + pad + `"}`, wantErr: "more than 65536"},
		{name: "empty id", id: "", give: `{"url":"http://h","interval":"1s"}`, wantErr: "key id: keyspace: invalid id: empty"},
		{name: "glob star id", id: "a*", give: `{"url":"http://h","interval":"1s"}`, wantErr: "invalid id"},
		{name: "glob question id", id: "a?", give: `{"url":"http://h","interval":"1s"}`, wantErr: "invalid id"},
		{name: "glob class id", id: "a[b", give: `{"url":"http://h","interval":"1s"}`, wantErr: "invalid id"},
		{name: "brace id", id: "a{b}", give: `{"url":"http://h","interval":"1s"}`, wantErr: "invalid id"},
		{name: "CR LF id", id: "a\r\nb", give: `{"url":"http://h","interval":"1s"}`, wantErr: "invalid id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Decode(tt.id, []byte(tt.give))
			if tt.wantErr == "" {
				require.NoError(t, err)
				require.Equal(t, tt.want, got)
				require.NoError(t, got.Validate())
				return
			}
			require.ErrorIs(t, err, ErrMalformed)
			require.ErrorContains(t, err, tt.wantErr)
			require.NotContains(t, err.Error(), "hunter2", "errors must not leak URL passwords")
			require.Equal(t, Session{}, got)
		})
	}
}

func TestEncodeRoundTrip(t *testing.T) {
	s := Session{ID: "s1", URL: "http://h/p", Interval: Duration(90 * time.Second), Labels: map[string]string{"k": "<v>"}}
	b, err := Encode(s)
	require.NoError(t, err)
	require.JSONEq(t, `{"id":"s1","url":"http://h/p","interval":"1m30s","labels":{"k":"<v>"}}`, string(b))
	got, err := Decode("s1", b)
	require.NoError(t, err)
	require.Equal(t, s, got)

	_, err = Encode(Session{ID: "s1", URL: "http://h", Interval: Duration(time.Second), Labels: map[string]string{"big": strings.Repeat("x", MaxValueBytes)}})
	require.ErrorIs(t, err, ErrMalformed)
	require.ErrorContains(t, err, "more than 65536")

	_, err = Encode(Session{ID: "s1", URL: "http://h"})
	require.ErrorIs(t, err, ErrMalformed)
}
