package main

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCachedSmall(t *testing.T) {
	p := smallParams()
	cp := CachedParams{Sessions: 3, Turns: 2, MaxTokens: 4, Duration: 200 * time.Millisecond, MinCosts: []int64{1024}}
	results, err := RunCached(context.Background(), p, cp)
	require.NoError(t, err)
	require.Len(t, results, 3, "no block, the block, the block + 1 min_request_cost")
	for _, r := range results {
		assert.Positive(t, r.Served, r.Condition)
		require.Len(t, r.Outstanding, p.Backends, r.Condition)
		for i := 1; i < len(r.Outstanding); i++ {
			assert.GreaterOrEqual(t, r.Outstanding[i-1], r.Outstanding[i], "largest first")
		}
	}
	assert.Equal(t, "load block + min_request_cost 1024", results[2].Condition)

	var buf bytes.Buffer
	require.NoError(t, WriteCachedTable(&buf, p, cp, results))
	assert.Contains(t, buf.String(), "| load block + min_request_cost 1024 | ")
	assert.Contains(t, buf.String(), "3 streaming sessions at once, each 2 turns")
}

func TestParseMinCosts(t *testing.T) {
	cases := []struct {
		in      string
		want    []int64
		wantErr bool
	}{
		{"256,1024, 4096", []int64{256, 1024, 4096}, false},
		{"", nil, false},
		{"0", nil, true},
		{"-5", nil, true},
		{"16777217", nil, true},
		{"12x", nil, true},
	}
	for _, tc := range cases {
		got, err := parseMinCosts(tc.in)
		if tc.wantErr {
			assert.Error(t, err, tc.in)
			continue
		}
		require.NoError(t, err, tc.in)
		assert.Equal(t, tc.want, got, tc.in)
	}
}
