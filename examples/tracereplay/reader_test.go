package main

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestParseLine(t *testing.T) {
	tests := []struct {
		name string
		line string
		want Request
		err  error
	}{
		{name: "valid", line: `{"timestamp": 5, "input_length": 1100, "output_length": 7, "hash_ids": [0, 1, 2]}`,
			want: Request{Timestamp: 5, InputTokens: 1100, OutputTokens: 7, Blocks: []int64{0, 1, 2}}},
		{name: "exact blocks", line: `{"timestamp":0,"input_length":1024,"output_length":0,"hash_ids":[0,9]}`,
			want: Request{InputTokens: 1024, Blocks: []int64{0, 9}}},
		{name: "unknown field ignored", line: `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[3],"x":"y"}`,
			want: Request{InputTokens: 1, OutputTokens: 1, Blocks: []int64{3}}},
		{name: "not json", line: `{"timestamp": 0,`, err: ErrSyntax},
		{name: "array", line: `[1,2]`, err: ErrSyntax},
		{name: "fractional", line: `{"timestamp":0.5,"input_length":1,"output_length":1,"hash_ids":[0]}`, err: ErrSyntax},
		{name: "string hash", line: `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":["a"]}`, err: ErrSyntax},
		{name: "no timestamp", line: `{"input_length":1,"output_length":1,"hash_ids":[0]}`, err: ErrMissingField},
		{name: "no input", line: `{"timestamp":0,"output_length":1,"hash_ids":[0]}`, err: ErrMissingField},
		{name: "no output", line: `{"timestamp":0,"input_length":1,"hash_ids":[0]}`, err: ErrMissingField},
		{name: "no hashes", line: `{"timestamp":0,"input_length":1,"output_length":1}`, err: ErrMissingField},
		{name: "null hashes", line: `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":null}`, err: ErrMissingField},
		{name: "negative timestamp", line: `{"timestamp":-1,"input_length":1,"output_length":1,"hash_ids":[0]}`, err: ErrInvalidValue},
		{name: "zero input", line: `{"timestamp":0,"input_length":0,"output_length":1,"hash_ids":[]}`, err: ErrInvalidValue},
		{name: "negative output", line: `{"timestamp":0,"input_length":1,"output_length":-1,"hash_ids":[0]}`, err: ErrInvalidValue},
		{name: "negative hash", line: `{"timestamp":0,"input_length":1,"output_length":1,"hash_ids":[-4]}`, err: ErrInvalidValue},
		{name: "too few hashes", line: `{"timestamp":0,"input_length":513,"output_length":1,"hash_ids":[0]}`, err: ErrBlockCount},
		{name: "too many hashes", line: `{"timestamp":0,"input_length":512,"output_length":1,"hash_ids":[0,1]}`, err: ErrBlockCount},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseLine([]byte(tt.line))
			if tt.err != nil {
				require.ErrorIs(t, err, tt.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestRequestBlockLen(t *testing.T) {
	r := Request{InputTokens: 1100, Blocks: []int64{0, 1, 2}}
	assert.Equal(t, []int{512, 512, 76}, []int{r.BlockLen(0), r.BlockLen(1), r.BlockLen(2)})
	assert.Equal(t, []int{0, 512, 1024, 1100, 1100}, []int{r.PrefixTokens(0), r.PrefixTokens(1), r.PrefixTokens(2), r.PrefixTokens(3), r.PrefixTokens(4)})
	assert.Equal(t, 2, r.FullBlocks())
}

// TestReadTraceSkipsMalformed: malformed lines are reported with their 1-based line
// number and skipped; the rest of the file is still read and sorted by time.
func TestReadTraceSkipsMalformed(t *testing.T) {
	in := strings.Join([]string{
		`{"timestamp": 10, "input_length": 600, "output_length": 1, "hash_ids": [0, 1]}`,
		``,
		`{"timestamp": 20, "input_length": 600, "output_length": 1, "hash_ids": [0]}`,
		`not json`,
		`{"timestamp": 5, "input_length": 100, "output_length": 2, "hash_ids": [0]}`,
		`   `,
		`{"timestamp": 30, "output_length": 1, "hash_ids": [0]}`,
		`{"timestamp": 40, "input_length": 10, "output_length": 3, "hash_ids": [7]}`, // no final newline
	}, "\r\n")
	tr, err := ReadTrace(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, tr.Requests, 3)
	assert.Equal(t, []int64{5, 10, 40}, []int64{tr.Requests[0].Timestamp, tr.Requests[1].Timestamp, tr.Requests[2].Timestamp})

	require.Len(t, tr.Skipped, 3)
	wantLines := []int{3, 4, 7}
	wantErrs := []error{ErrBlockCount, ErrSyntax, ErrMissingField}
	for i, e := range tr.Skipped {
		var le *LineError
		require.True(t, errors.As(e, &le), "skipped[%d] = %v", i, e)
		assert.Equal(t, wantLines[i], le.Line)
		assert.ErrorIs(t, e, wantErrs[i])
		assert.Contains(t, e.Error(), "line "+string(rune('0'+wantLines[i]))+":")
	}
}

func TestReadTraceEmpty(t *testing.T) {
	for _, in := range []string{"", "\n\n", "garbage\n{}\n"} {
		_, err := ReadTrace(strings.NewReader(in))
		require.ErrorIs(t, err, ErrEmptyTrace, "input %q", in)
	}
	_, err := ReadTrace(strings.NewReader("garbage\n"))
	var le *LineError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, 1, le.Line)
}

func TestReadTraceLongLine(t *testing.T) {
	good := `{"timestamp": 1, "input_length": 1, "output_length": 1, "hash_ids": [0]}`
	long := `{"timestamp": 0, "x": "` + strings.Repeat("a", maxLineBytes) + `"}`
	tr, err := ReadTrace(strings.NewReader(good + "\n" + long + "\n" + good))
	require.NoError(t, err)
	assert.Len(t, tr.Requests, 2)
	require.Len(t, tr.Skipped, 1)
	assert.ErrorIs(t, tr.Skipped[0], ErrLineTooLong)
	var le *LineError
	require.ErrorAs(t, tr.Skipped[0], &le)
	assert.Equal(t, 2, le.Line)
}

// FuzzParseLine: ParseLine never panics; whatever it accepts satisfies the format's
// invariants and survives a JSON round trip unchanged.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}`,
		`{"timestamp":1,"input_length":512,"output_length":0,"hash_ids":[0]}`,
		`{"timestamp":1,"input_length":513,"output_length":0,"hash_ids":[0]}`,
		`{"timestamp":-1}`, `[]`, `null`, `{}`, `{"hash_ids":[1e30]}`, "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		r, err := ParseLine(line)
		if err != nil {
			if !errors.Is(err, ErrSyntax) && !errors.Is(err, ErrMissingField) &&
				!errors.Is(err, ErrInvalidValue) && !errors.Is(err, ErrBlockCount) {
				t.Fatalf("error %v wraps no sentinel", err)
			}
			return
		}
		if r.Timestamp < 0 || r.InputTokens < 1 || r.OutputTokens < 0 {
			t.Fatalf("accepted invalid values: %+v", r)
		}
		if len(r.Blocks) != (r.InputTokens+BlockTokens-1)/BlockTokens {
			t.Fatalf("accepted %d blocks for %d tokens", len(r.Blocks), r.InputTokens)
		}
		sum := 0
		for i, h := range r.Blocks {
			if h < 0 {
				t.Fatalf("accepted negative hash %d", h)
			}
			sum += r.BlockLen(i)
		}
		if sum != r.InputTokens {
			t.Fatalf("block lengths sum to %d, want %d", sum, r.InputTokens)
		}
		again, err := json.Marshal(map[string]any{"timestamp": r.Timestamp, "input_length": r.InputTokens,
			"output_length": r.OutputTokens, "hash_ids": r.Blocks})
		if err != nil {
			t.Fatal(err)
		}
		r2, err := ParseLine(again)
		if err != nil {
			t.Fatalf("round trip of %s: %v", again, err)
		}
		assert.Equal(t, r, r2)
	})
}
