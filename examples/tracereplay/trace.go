package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
)

// BlockTokens is the prefix-block size of the Mooncake trace format: one hash_id per
// 512 prompt tokens.
const BlockTokens = 512

// maxLineBytes bounds one JSONL line (a 128k-token prompt is ~250 hash ids, ~2 KB; the
// bound leaves room for far longer prompts). Longer lines are reported as ErrLineTooLong.
const maxLineBytes = 4 << 20

// Sentinel errors of the reader. Every error about one line is a *LineError wrapping one
// of these; branch with errors.Is.
var (
	// ErrSyntax: the line is not a JSON object of the expected shape (bad JSON, wrong
	// types, fractional numbers).
	ErrSyntax = errors.New("tracereplay: malformed JSON")
	// ErrMissingField: timestamp, input_length, output_length or hash_ids is absent.
	ErrMissingField = errors.New("tracereplay: missing field")
	// ErrInvalidValue: a field has an impossible value (negative timestamp or output,
	// input_length < 1, negative hash id).
	ErrInvalidValue = errors.New("tracereplay: invalid value")
	// ErrBlockCount: len(hash_ids) != ceil(input_length / 512).
	ErrBlockCount = errors.New("tracereplay: hash_ids do not match input_length")
	// ErrLineTooLong: the line exceeds the reader's line limit (4 MiB).
	ErrLineTooLong = errors.New("tracereplay: line too long")
	// ErrEmptyTrace: the input holds no valid request.
	ErrEmptyTrace = errors.New("tracereplay: no valid request in trace")
)

// LineError reports a malformed line. Line is 1-based.
type LineError struct {
	Line int
	Err  error
}

func (e *LineError) Error() string { return fmt.Sprintf("line %d: %v", e.Line, e.Err) }

// Unwrap returns the underlying error (one of the sentinels, possibly wrapped).
func (e *LineError) Unwrap() error { return e.Err }

// Request is one trace line: a prompt of InputTokens tokens whose 512-token prefix blocks
// are identified by Blocks (the hash at position i identifies the whole prefix up to
// block i), producing OutputTokens tokens, arriving at Timestamp ms after trace start.
type Request struct {
	Timestamp    int64 // ms since trace start
	InputTokens  int
	OutputTokens int
	Blocks       []int64
}

// BlockLen returns the real length in tokens of block i: 512 for full blocks, the
// remainder for the (usually partial) last block.
func (r *Request) BlockLen(i int) int {
	return min(BlockTokens, r.InputTokens-i*BlockTokens)
}

// PrefixTokens returns the number of prompt tokens in the first k blocks.
func (r *Request) PrefixTokens(k int) int {
	if k >= len(r.Blocks) {
		return r.InputTokens
	}
	return k * BlockTokens
}

// FullBlocks returns how many of the request's blocks hold exactly 512 tokens.
func (r *Request) FullBlocks() int { return r.InputTokens / BlockTokens }

// rawRequest uses pointers to tell absent fields from zero values.
type rawRequest struct {
	Timestamp    *int64   `json:"timestamp"`
	InputLength  *int     `json:"input_length"`
	OutputLength *int     `json:"output_length"`
	HashIDs      *[]int64 `json:"hash_ids"`
}

// ParseLine parses and validates one JSONL line of the Mooncake trace format. Unknown
// fields are ignored. Errors wrap ErrSyntax, ErrMissingField, ErrInvalidValue or
// ErrBlockCount (without a line number: the caller adds it).
func ParseLine(line []byte) (Request, error) {
	var raw rawRequest
	if err := json.Unmarshal(line, &raw); err != nil {
		return Request{}, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	switch {
	case raw.Timestamp == nil:
		return Request{}, fmt.Errorf("%w: timestamp", ErrMissingField)
	case raw.InputLength == nil:
		return Request{}, fmt.Errorf("%w: input_length", ErrMissingField)
	case raw.OutputLength == nil:
		return Request{}, fmt.Errorf("%w: output_length", ErrMissingField)
	case raw.HashIDs == nil:
		return Request{}, fmt.Errorf("%w: hash_ids", ErrMissingField)
	}
	r := Request{
		Timestamp:    *raw.Timestamp,
		InputTokens:  *raw.InputLength,
		OutputTokens: *raw.OutputLength,
		Blocks:       *raw.HashIDs,
	}
	switch {
	case r.Timestamp < 0:
		return Request{}, fmt.Errorf("%w: timestamp %d < 0", ErrInvalidValue, r.Timestamp)
	case r.InputTokens < 1:
		return Request{}, fmt.Errorf("%w: input_length %d < 1", ErrInvalidValue, r.InputTokens)
	case r.OutputTokens < 0:
		return Request{}, fmt.Errorf("%w: output_length %d < 0", ErrInvalidValue, r.OutputTokens)
	}
	if want := (r.InputTokens + BlockTokens - 1) / BlockTokens; len(r.Blocks) != want {
		return Request{}, fmt.Errorf("%w: %d hash_ids for input_length %d (want %d)",
			ErrBlockCount, len(r.Blocks), r.InputTokens, want)
	}
	for i, h := range r.Blocks {
		if h < 0 {
			return Request{}, fmt.Errorf("%w: hash_ids[%d] = %d < 0", ErrInvalidValue, i, h)
		}
	}
	return r, nil
}

// Trace is a parsed request trace, sorted by timestamp (stable: equal timestamps keep
// file order).
type Trace struct {
	Requests []Request
	// Skipped holds one *LineError per malformed line that was skipped, in file order.
	Skipped []error
}

// ReadTrace reads a Mooncake-format JSONL trace. Blank lines are ignored. A malformed
// line does not stop the reader: it is recorded in Trace.Skipped (a *LineError with its
// 1-based line number) and the rest of the file is still read; callers decide whether
// skipped lines are fatal (the command reports them and, with -strict, exits). The
// requests are stably sorted by timestamp. The returned error is non-nil only for an I/O
// error or when no valid request remains (ErrEmptyTrace, joined with the skipped lines).
func ReadTrace(r io.Reader) (*Trace, error) {
	tr := &Trace{}
	br := bufio.NewReaderSize(r, 64<<10)
	for lineNo := 1; ; lineNo++ {
		line, err := readLine(br)
		if len(line) > 0 || errors.Is(err, ErrLineTooLong) {
			switch {
			case errors.Is(err, ErrLineTooLong):
				tr.Skipped = append(tr.Skipped, &LineError{Line: lineNo, Err: err})
			case len(bytes.TrimSpace(line)) == 0:
			default:
				req, perr := ParseLine(line)
				if perr != nil {
					tr.Skipped = append(tr.Skipped, &LineError{Line: lineNo, Err: perr})
				} else {
					tr.Requests = append(tr.Requests, req)
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil && !errors.Is(err, ErrLineTooLong) {
			return nil, fmt.Errorf("tracereplay: read line %d: %w", lineNo, err)
		}
	}
	if len(tr.Requests) == 0 {
		return tr, errors.Join(append([]error{ErrEmptyTrace}, tr.Skipped...)...)
	}
	sort.SliceStable(tr.Requests, func(i, j int) bool {
		return tr.Requests[i].Timestamp < tr.Requests[j].Timestamp
	})
	return tr, nil
}

// readLine returns the next line without its terminator; io.EOF after the last line.
// A line over maxLineBytes is consumed and reported as ErrLineTooLong.
func readLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	tooLong := false
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			buf = append(buf, chunk...)
			if len(buf) > maxLineBytes {
				tooLong, buf = true, nil
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if tooLong {
			if err == io.EOF {
				return nil, errors.Join(ErrLineTooLong, io.EOF)
			}
			return nil, ErrLineTooLong
		}
		buf = bytes.TrimRight(buf, "\r\n")
		if err == io.EOF && len(buf) > 0 {
			return buf, nil // last line without newline; EOF on the next call
		}
		return buf, err
	}
}

// Facts summarises a trace: what its README lists to check a reader against.
type Facts struct {
	Requests       int
	DistinctBlocks int
	InputTokens    int64
	OutputTokens   int64
	Duration       int64 // ms from first to last timestamp
	// IdealHitRatio is the prefix hit ratio of one infinite cache: each request reuses
	// the longest prefix of its blocks that any earlier request has sent (prefix
	// semantics), counted in tokens with the partial last block at its real length;
	// every block of every request (including the partial last one) is cached.
	IdealHitRatio float64
}

// ComputeFacts computes Facts in one pass; cost O(total blocks).
func ComputeFacts(reqs []Request) Facts {
	f := Facts{Requests: len(reqs)}
	seen := make(map[int64]struct{}, 1<<16)
	var reused int64
	for i := range reqs {
		r := &reqs[i]
		f.InputTokens += int64(r.InputTokens)
		f.OutputTokens += int64(r.OutputTokens)
		k := 0
		for k < len(r.Blocks) {
			if _, ok := seen[r.Blocks[k]]; !ok {
				break
			}
			k++
		}
		reused += int64(r.PrefixTokens(k))
		for _, b := range r.Blocks {
			seen[b] = struct{}{}
		}
	}
	f.DistinctBlocks = len(seen)
	if f.InputTokens > 0 {
		f.IdealHitRatio = float64(reused) / float64(f.InputTokens)
	}
	if len(reqs) > 0 {
		f.Duration = reqs[len(reqs)-1].Timestamp - reqs[0].Timestamp
	}
	return f
}
