package affinity_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/agentserve/sessionaffinity/affinity"
)

// configCase is one JSON configuration and the error it must give.
type configCase struct {
	name    string
	json    string
	wantErr string // substring naming the key; "" = valid
}

// runConfigCases decodes each case's JSON into an affinity.Config and builds a
// Scheduler from it: a valid case must succeed, an invalid one must fail with
// ErrInvalidConfig and a message containing wantErr.
func runConfigCases(t *testing.T, cases []configCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var cfg affinity.Config
			err := json.Unmarshal([]byte(tc.json), &cfg)
			if err == nil {
				_, err = affinity.New(cfg)
			}
			if tc.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, affinity.ErrInvalidConfig)
			assert.Contains(t, err.Error(), tc.wantErr)
		})
	}
}
