package main

import (
	"bytes"
	"io"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMETablesMatchRun replays the real trace with the flags of each "Results on a
// real trace" table of the README (N = 4, 8, 16, and 8 with outages: the default
// policies) and checks the README shows exactly the table tracereplay prints, every
// policy row included. Skipped without the trace (see loadRealTrace) and with -short.
func TestREADMETablesMatchRun(t *testing.T) {
	if testing.Short() {
		t.Skip("replays the real trace four times")
	}
	loadRealTrace(t) // skips (or fails under CI) without the trace
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	heading := regexp.MustCompile("(?m)^\\*\\*N = \\d+[^*]*\\*\\* \\(`(?:go run -C examples \\./tracereplay )?(-backends [^`]*)`")
	found := heading.FindAllSubmatchIndex(readme, -1)
	require.Len(t, found, 4, "the four tables of \"Results on a real trace\"")
	for _, m := range found {
		flags := string(readme[m[2]:m[3]])
		t.Run(flags, func(t *testing.T) {
			want := policyTable(string(readme[m[1]:]))
			require.NotEmpty(t, want, "no table after the heading")
			args := []string{"-trace", realTracePath, "-quiet"}
			for _, f := range strings.Fields(flags) {
				args = append(args, strings.Trim(f, `"`))
			}
			var out bytes.Buffer
			require.NoError(t, run(args, &out, io.Discard))
			assert.Equal(t, policyTable(out.String()), want)
		})
	}
}

// policyTable returns the first markdown table in s that starts with "| policy |", up
// to the first blank line.
func policyTable(s string) string {
	i := strings.Index(s, "| policy |")
	if i < 0 {
		return ""
	}
	s = s[i:]
	if j := strings.Index(s, "\n\n"); j >= 0 {
		s = s[:j]
	}
	return s
}
